package policy

import (
	"fmt"
	"slices"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"

	defaultbundle "github.com/egressd/egressd/rego"
)

func TestBodyScopes(t *testing.T) {
	tests := []struct {
		name    string
		modules map[string]string // file name → module text after the package line
		want    []BodyScope
		anyHost bool
	}{
		{name: "no body rule", modules: map[string]string{"a.rego": `
allow if input.host == "a.example"`}},
		{name: "host scoped", modules: map[string]string{"a.rego": `
allow if {
	input.host == "api.example"
	input.body.model == "x"
}`}, want: []BodyScope{{Host: "api.example"}}},
		{name: "literal on the left, unify, port", modules: map[string]string{"a.rego": `
allow if {
	"api.example" = input.host
	input.port == 443
	input.mcp.tool == "search"
}`}, want: []BodyScope{{Host: "api.example", Port: 443}}},
		{name: "host and port sets", modules: map[string]string{"a.rego": `
allow if {
	input.host in {"b.example", "a.example"}
	input.port in [443, 8443]
	input.llm.model == "m"
}`}, want: []BodyScope{{"a.example", 443}, {"a.example", 8443}, {"b.example", 443}, {"b.example", 8443}}},
		{name: "float port", modules: map[string]string{"a.rego": `
allow if { input.host == "a"; input.port == 443.0; input.body.x }`}, want: []BodyScope{{"a", 443}}},
		{name: "two host checks intersect", modules: map[string]string{"a.rego": `
allow if { input.host in {"a", "b"}; input.host == "b"; input.body.x }`}, want: []BodyScope{{Host: "b"}}},
		{name: "disjoint host checks never apply", modules: map[string]string{"a.rego": `
allow if { input.host == "a"; input.host == "b"; input.body.x }`}},
		{name: "unscoped", modules: map[string]string{"a.rego": `
allow if input.body.x == 1`}, anyHost: true},
		{name: "negated host check does not scope", modules: map[string]string{"a.rego": `
allow if { not input.host == "a"; input.body.x }`}, anyHost: true},
		{name: "host check under with does not scope", modules: map[string]string{"a.rego": `
h if input.host == "a"
allow if { input.host == "a" with input.host as "a"; input.body.x }`}, anyHost: true},
		{name: "with on input.host counts", modules: map[string]string{"a.rego": `
scoped if { input.host == "a"; input.body.x }
allow if { input.host == "z"; scoped with input.host as "a" }`}, want: []BodyScope{{Host: "a"}, {Host: "z"}}},
		{name: "with on data does not count", modules: map[string]string{"a.rego": `
allow if { input.host == "z"; data.x.y with data.z as 1 }`}},
		{name: "host through a variable does not scope", modules: map[string]string{"a.rego": `
allow if { h := input.host; h == "a"; input.body.x }`}, anyHost: true},
		{name: "host from data does not scope", modules: map[string]string{"a.rego": `
allow if { input.host == data.h; input.body.x }`}, anyHost: true},
		{name: "body in the head value", modules: map[string]string{"a.rego": `
model := input.llm.model if input.host == "m.example"`}, want: []BodyScope{{Host: "m.example"}}},
		{name: "body in a comprehension and a negation", modules: map[string]string{"a.rego": `
deny contains x if {
	input.host == "a"
	x := [t | some t in input.mcp.tools]
	not input.body.ok
}`}, want: []BodyScope{{Host: "a"}}},
		{name: "bracket key", modules: map[string]string{"a.rego": `
allow if { input.host == "a"; input["body"].x }`}, want: []BodyScope{{Host: "a"}}},
		{name: "dynamic key counts", modules: map[string]string{"a.rego": `
allow if { some k; input[k] == 1 }`}, anyHost: true},
		{name: "input passed whole", modules: map[string]string{"a.rego": `
f(x) := x.body.a
allow if f(input) == 1`}, anyHost: true},
		{name: "input passed whole, scoped", modules: map[string]string{"a.rego": `
f(x) := x.body.a
allow if { input.host == "a"; f(input) == 1 }`}, want: []BodyScope{{Host: "a"}}},
		{name: "function reading the body", modules: map[string]string{"a.rego": `
f(x) if { input.host == "fn"; input.body.a == x }`}, want: []BodyScope{{Host: "fn"}}},
		{name: "input as a key of data is not the body", modules: map[string]string{"a.rego": `
allow if data.hosts[input.host]`}},
		{name: "body nested in a ref key", modules: map[string]string{"a.rego": `
allow if data.models[input.llm.model]`}, anyHost: true},
		{name: "other input keys", modules: map[string]string{"a.rego": `
allow if { input.method == "POST"; input.path == "/x"; input.identity.id == "s" }`}},
		{name: "else clauses scoped on their own", modules: map[string]string{"a.rego": `
level := 1 if {
	input.host == "a"
	input.body.x
} else := 2 if {
	input.host == "b"
	input.body.y
} else := 3`}, want: []BodyScope{{Host: "a"}, {Host: "b"}}},
		{name: "unscoped else", modules: map[string]string{"a.rego": `
level := 1 if input.host == "a" else := input.body.y`}, anyHost: true},
		{name: "import of the body", modules: map[string]string{"a.rego": `
import input.mcp as call
allow if { input.host == "a"; call.tool == "t" }`}, want: []BodyScope{{Host: "a"}}},
		{name: "import of input", modules: map[string]string{"a.rego": `
import input as req
allow if { req.host == "r"; req.port == 8080; req.body.x }`}, want: []BodyScope{{"r", 8080}}},
		{name: "import of another key", modules: map[string]string{"a.rego": `
import input.identity as who
allow if who.id == "s"`}},
		{name: "test modules skipped", modules: map[string]string{
			"a.rego":      `allow if input.host == "a"`,
			"a_test.rego": `test_x if allow with input as {"body": {"x": 1}}`,
		}},
		{name: "several modules", modules: map[string]string{
			"a.rego": `allow if { input.host == "a"; input.body.x }`,
			"b.rego": `allow if { input.host == "a"; input.port == 1; input.body.x }`,
			"c.rego": `allow if { input.host == "c"; input.body.x }`,
		}, want: []BodyScope{{Host: "a"}, {"a", 1}, {Host: "c"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			modules := map[string]*ast.Module{}
			for name, text := range tt.modules {
				m, err := ast.ParseModuleWithOpts(name, fmt.Sprintf("package p%d\n%s", len(modules), text),
					ast.ParserOptions{RegoVersion: ast.RegoV1})
				if err != nil {
					t.Fatalf("parse %s: %v", name, err)
				}
				modules[name] = m
			}
			got, anyHost := bodyScopes(modules)
			if !slices.Equal(got, tt.want) || anyHost != tt.anyHost {
				t.Fatalf("bodyScopes = %v, %v; want %v, %v", got, anyHost, tt.want, tt.anyHost)
			}
		})
	}
}

// TestBodyScopesShipped pins that the shipped bundle reads no body: no
// rule of it refers to one.
func TestBodyScopesShipped(t *testing.T) {
	srcs, err := readBundle(defaultbundle.FS)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := parseBundle(srcs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if scopes, anyHost := bodyScopes(pb.modules); len(scopes) != 0 || anyHost {
		t.Fatalf("bodyScopes(shipped bundle) = %v, %v; want none", scopes, anyHost)
	}
}
