package policy

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"go.uber.org/zap"
)

const credentialRules = `{"rules": [
  {"id": "gw", "hosts": ["10.20.0.5"], "ports": [8080], "methods": ["GET"],
   "credentials": [{"secret": "github", "header": "Authorization", "format": "Bearer {}"},
                   {"secret": "maps", "placeholder": "query:key", "require": true, "allow_range": true}]},
  {"id": "plain", "hosts": ["10.20.0.6"], "ports": [8080]}
]}`

// TestCredentialsOnDecision: an allowed http decision carries the
// allowing rule's actions; a redirect, a deny, and a rule without
// credentials carry none.
func TestCredentialsOnDecision(t *testing.T) {
	e := newTestEngine(t, Config{Dir: modulesWithData(t, credentialRules)})
	ctx := context.Background()
	want := []Credential{
		{Secret: "github", Header: "Authorization", Format: "Bearer {}"},
		{Secret: "maps", Placeholder: "query:key", Require: true, AllowRange: true},
	}
	tests := []struct {
		name string
		kind Kind
		m, u string
		want []Credential
	}{
		{"allowed by the rule", KindHTTP, "GET", "http://10.20.0.5:8080/x", want},
		{"redirect", KindRedirect, "GET", "http://10.20.0.5:8080/x", nil},
		{"method the rule does not allow", KindHTTP, "POST", "http://10.20.0.5:8080/x", nil},
		{"rule without credentials", KindHTTP, "GET", "http://10.20.0.6:8080/x", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := ParseHTTP(tt.kind, tt.m, tt.u, "")
			if err != nil {
				t.Fatal(err)
			}
			d := e.Decide(ctx, Input{Facts: f})
			if !reflect.DeepEqual(d.Credentials, tt.want) {
				t.Errorf("Decide(%s %s).Credentials = %+v; want %+v", tt.m, tt.u, d.Credentials, tt.want)
			}
		})
	}
	rules := e.CredentialRules()
	if len(rules) != 1 || rules[0].ID != "gw" || rules[0].Index != 0 || !reflect.DeepEqual(rules[0].Credentials, want) {
		t.Errorf("CredentialRules() = %+v; want the one rule gw", rules)
	}
}

func TestCredentialsRefusedAtLoad(t *testing.T) {
	rule := func(creds string) string {
		return `{"rules": [{"id": "ok", "hosts": ["a.test"], "ports": [443]}, {"id": "r", "hosts": ["b.test"], "ports": [443], "credentials": [` + creds + `]}]}`
	}
	tests := []struct {
		name, data, want string
	}{
		{"unknown key", rule(`{"secret": "s", "header": "X", "value": "inline"}`), `rules[1].credentials[0]: json: unknown field "value" (rule "r")`},
		{"two forms", rule(`{"secret": "s", "header": "X", "placeholder": "header:Y"}`), "set exactly one of header, basic and placeholder"},
		{"no form", rule(`{"secret": "s"}`), "set exactly one of header, basic and placeholder"},
		{"bad secret name", rule(`{"secret": "a b", "header": "X"}`), "rules[1].credentials[0].secret must be a secret name"},
		{"format without braces", rule(`{"secret": "s", "header": "X", "format": "Bearer"}`), `format must hold "{}" exactly once`},
		{"format on a placeholder", rule(`{"secret": "s", "placeholder": "header:X", "format": "{}"}`), "format is only for a header action"},
		{"require on a header", rule(`{"secret": "s", "header": "X", "require": true}`), "require is only for a placeholder action"},
		{"proxy header", rule(`{"secret": "s", "header": "Proxy-Authorization"}`), `"Proxy-Authorization" is the proxy's own`},
		{"host header", rule(`{"secret": "s", "placeholder": "header:host"}`), `"host" is the proxy's own`},
		{"bad placeholder place", rule(`{"secret": "s", "placeholder": "body:x"}`), `placeholder must be "header:NAME" or "query:NAME"`},
		{"basic user with colon", rule(`{"secret": "s", "basic": {"user": "a:b"}}`), "basic.user must be printable ASCII without ':'"},
		{"header set twice", rule(`{"secret": "s", "header": "Authorization"}, {"secret": "t", "basic": {"user": "u"}}`), `rules[1].credentials[1] acts on header "Authorization" like credentials[0]`},
		{"deny rule", `{"rules": [{"id": "d", "hosts": ["b.test"], "ports": [443], "action": "deny", "credentials": [{"secret": "s", "header": "X"}]}]}`, "a deny rule sends nothing upstream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(context.Background(), Config{Dir: modulesWithData(t, tt.data)}, zap.NewNop())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New error = %v; want one containing %q", err, tt.want)
			}
		})
	}
}
