package policy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// writeBundle writes files into dir (created if empty) and returns it.
func writeBundle(t *testing.T, dir string, files map[string]string) string {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const miniHTTP = `package egress.http

decision := {"allow": true, "reason": "allowed", "rule": "mini"} if input.host == "ok.test"
else := {"allow": false, "reason": "no_matching_rule", "rule": ""}
`

func mustParse(t testing.TB, method, url string) *URLFacts {
	t.Helper()
	f, err := ParseHTTP(KindHTTP, method, url, "")
	if err != nil {
		t.Fatalf("ParseHTTP(%q): %v", url, err)
	}
	return f
}

// A reload builds a new Engine (serve's reload), so what a reload refuses
// is what New refuses; that the running policy keeps deciding is
// e2e.TestReloadRefusesBrokenPolicy.

func TestNewRefusesSyntaxError(t *testing.T) {
	dir := writeBundle(t, "", map[string]string{"http.rego": "package egress.http\n\ndecision := {\"allow\": true,, }\n\nx := 1\n"})
	_, err := New(context.Background(), Config{Dir: dir}, zap.NewNop())
	if err == nil || !strings.Contains(err.Error(), "http.rego:3") {
		t.Fatalf("New() error = %v; want one naming http.rego:3", err)
	}
}

func TestNewRefusesFailingTests(t *testing.T) {
	dir := writeBundle(t, "", map[string]string{"http.rego": miniHTTP, "http_test.rego": `package egress.http_test

import data.egress.http

test_ok if http.decision.allow with input as {"host": "ok.test"}

test_wrong if http.decision.allow with input as {"host": "nope.test"}
`})
	_, err := New(context.Background(), Config{Dir: dir}, zap.NewNop())
	var te *TestError
	if !errors.As(err, &te) || len(te.Failures) != 1 || te.Failures[0].Location != "http_test.rego:7" || te.Passed != 1 {
		t.Fatalf("New() error = %#v; want one failure at http_test.rego:7", err)
	}
}

func TestLoadErrorsNameTheKey(t *testing.T) {
	tests := []struct {
		name string
		data string
		want string
	}{
		{"unknown field", `{"rules": [{"id": "a", "hosts": ["a.test"], "ports": [443], "verbs": ["GET"]}]}`, `rules[0] has unknown key "verbs" (rule "a")`},
		{"no ports", `{"rules": [{"id": "a", "hosts": ["a.test"]}]}`, "rules[0].ports must be non-empty"},
		{"upper-case host", `{"rules": [{"id": "a", "hosts": ["A.test"], "ports": [443]}]}`, "rules[0].hosts[0] must be a lower-case"},
		{"non-canonical IP", `{"rules": [{"id": "a", "hosts": ["::0001"], "ports": [443]}]}`, "canonical IP"},
		{"obfuscated IP", `{"rules": [{"id": "a", "hosts": ["127.1"], "ports": [443]}]}`, "rules[0].hosts[0]"},
		{"unmasked CIDR", `{"rules": [{"id": "a", "hosts": ["10.0.0.1/8"], "ports": [443]}]}`, "canonical CIDR"},
		{"duplicate id", `{"rules": [{"id": "a", "hosts": ["a.test"], "ports": [443]}, {"id": "a", "hosts": ["b.test"], "ports": [443]}]}`, "rules[1].id \"a\" is also rules[0].id"},
		{"bad action", `{"rules": [{"id": "a", "hosts": ["a.test"], "ports": [443], "action": "drop"}]}`, "rules[0].action"},
		{"relative path", `{"rules": [{"id": "a", "hosts": ["a.test"], "ports": [443], "paths": ["x/*"]}]}`, "rules[0].paths[0]"},
		{"bad glob", `{"rules": [{"id": "a", "hosts": ["a.test"], "ports": [443], "paths": ["/x/[a"]}]}`, `data.json: rules[0].paths[0] must be a glob`},
		{"reserved index", `{"rule_index": {}}`, "data.rule_index is reserved"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeBundle(t, "", map[string]string{"http.rego": miniHTTP, "data.json": tt.data})
			_, err := Check(context.Background(), os.DirFS(dir))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Check(%s) error = %v; want it to contain %q", tt.data, err, tt.want)
			}
		})
	}
}

func TestDecideFailsClosed(t *testing.T) {
	tests := []struct {
		name    string
		module  string
		timeout time.Duration
		reason  Reason
	}{
		{"undefined", "package egress.http\n\ndecision := 1 if false\n", 0, ReasonNoDecision},
		{"no decision rule", "package egress.http\n\nx := 1\n", 0, ReasonNoDecision},
		{"not an object", "package egress.http\n\ndecision := true\n", 0, ReasonMalformedDecision},
		{"allow not bool", `package egress.http

decision := {"allow": "yes", "reason": "", "rule": ""}
`, 0, ReasonMalformedDecision},
		{"deny without reason", `package egress.http

decision := {"allow": false, "reason": "", "rule": ""}
`, 0, ReasonMalformedDecision},
		{"eval conflict", `package egress.http

decision := {"allow": true, "reason": "allowed", "rule": "a"} if input.host

decision := {"allow": false, "reason": "no", "rule": "b"} if input.port
`, 0, ReasonPolicyError},
		{"timeout", `package egress.http

decision := {"allow": true, "reason": "allowed", "rule": "slow"} if {
	some i in numbers.range(1, 3000)
	some j in numbers.range(1, 3000)
	i * j == -1
}
`, time.Millisecond, ReasonPolicyTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeBundle(t, "", map[string]string{"http.rego": tt.module})
			e := newTestEngine(t, Config{Dir: dir, EvalTimeout: tt.timeout})
			d := e.Decide(context.Background(), Input{Facts: mustParse(t, "GET", "https://ok.test/")})
			if d.Allow || d.Reason != tt.reason || d.Policy != e.Digest() {
				t.Errorf("Decide = %+v; want deny %s by %s", d, tt.reason, e.Digest())
			}
		})
	}
}

func TestDecideWithoutFactsOrEntryPoint(t *testing.T) {
	e := newTestEngine(t, Config{Dir: writeBundle(t, "", map[string]string{"http.rego": miniHTTP})})
	if d := e.Decide(context.Background(), Input{}); d.Allow || d.Reason != ReasonNoFacts {
		t.Errorf("Decide(no facts) = %+v; want deny %s", d, ReasonNoFacts)
	}
	c, err := ParseConnect("ok.test:443")
	if err != nil {
		t.Fatal(err)
	}
	if d := e.Decide(context.Background(), Input{Facts: c}); d.Allow || d.Reason != ReasonNoDecision {
		t.Errorf("Decide(connect without egress.connect) = %+v; want deny %s", d, ReasonNoDecision)
	}
}

// TestCachedDecideAllocatesNothing guards the hot path: a cached decision
// is a map lookup, with no allocation.
func TestCachedDecideAllocatesNothing(t *testing.T) {
	e := newTestEngine(t, Config{})
	in := Input{
		Identity: Identity{ID: "sandbox-1", Attributes: map[string]string{"team": "a", "sql_profile": "ro", "tier": "1"}},
		Facts:    mustParse(t, "GET", "https://api.github.com/repos/o/r"),
	}
	ctx := context.Background()
	want := e.Decide(ctx, in)
	allocs := testing.AllocsPerRun(200, func() {
		if d := e.Decide(ctx, in); d.Allow != want.Allow || d.Reason != want.Reason || d.Rule != want.Rule || d.Policy != want.Policy {
			t.Fatalf("cached Decide = %+v; want %+v", d, want)
		}
	})
	if allocs != 0 {
		t.Errorf("cached Decide allocates %v times per call; want 0", allocs)
	}
}

func TestCacheIsBounded(t *testing.T) {
	e := newTestEngine(t, Config{CacheSize: 2})
	for _, u := range []string{"https://a.test/", "https://b.test/", "https://c.test/", "https://pypi.org/"} {
		e.Decide(context.Background(), Input{Facts: mustParse(t, "GET", u)})
	}
	if n := e.cur.cache.len(); n != 2 {
		t.Errorf("cache holds %d decisions; want 2", n)
	}
}

func TestCacheKeyIgnoresAttributeOrder(t *testing.T) {
	f := mustParse(t, "GET", "https://pypi.org/")
	a := Input{Identity: Identity{ID: "x", Attributes: map[string]string{"a": "1", "b": "2", "c": "3"}}, Facts: f}
	b := Input{Identity: Identity{ID: "x", Attributes: map[string]string{"c": "3", "b": "2", "a": "1"}}, Facts: f}
	c := Input{Identity: Identity{ID: "x", Attributes: map[string]string{"a": "1", "b": "2", "c": "4"}}, Facts: f}
	ka, kb, kc := appendInputKey(nil, KindHTTP, a), appendInputKey(nil, KindHTTP, b), appendInputKey(nil, KindHTTP, c)
	if string(ka) != string(kb) {
		t.Errorf("keys differ for the same attributes")
	}
	if string(ka) == string(kc) {
		t.Errorf("keys equal for different attributes")
	}
}

func TestBundleDataLayout(t *testing.T) {
	dir := writeBundle(t, "", map[string]string{
		"http.rego": `package egress.http

decision := {"allow": true, "reason": "allowed", "rule": data.rules[0].id} if {
	data.extra.flag
	data.rule_index.hosts[input.host]
}
`,
		"data.yaml":       "rules:\n  - id: from-yaml\n    hosts: [ok.test]\n    ports: [443]\n",
		"extra/data.json": `{"flag": true}`,
		"notes.txt":       "ignored",
	})
	e := newTestEngine(t, Config{Dir: dir})
	d := e.Decide(context.Background(), Input{Facts: mustParse(t, "GET", "https://ok.test/")})
	if !d.Allow || d.Rule != "from-yaml" {
		t.Errorf("Decide = %+v; want allow by from-yaml (data.yaml at data, extra/data.json at data.extra)", d)
	}
	dup := writeBundle(t, "", map[string]string{
		"http.rego":       miniHTTP,
		"data.json":       `{"extra": {"flag": true}}`,
		"extra/data.json": `{"flag": false}`,
	})
	if _, err := Check(context.Background(), os.DirFS(dup)); err == nil || !strings.Contains(err.Error(), `"flag" defined twice`) {
		t.Errorf("Check(duplicate key) error = %v; want it to name the key", err)
	}
}

func TestDigestCoversPathsAndContents(t *testing.T) {
	a := digestOf([]source{{name: "a.rego", data: []byte("x")}, {name: "data.json", data: []byte("{}")}})
	b := digestOf([]source{{name: "b.rego", data: []byte("x")}, {name: "data.json", data: []byte("{}")}})
	c := digestOf([]source{{name: "a.rego", data: []byte("y")}, {name: "data.json", data: []byte("{}")}})
	d := digestOf([]source{{name: "a.regox", data: []byte("")}, {name: "data.json", data: []byte("{}")}})
	if a == b || a == c || a == d || !strings.HasPrefix(a, "sha256:") {
		t.Errorf("digests %s %s %s %s; want distinct sha256: digests", a, b, c, d)
	}
}
