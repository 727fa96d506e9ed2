package policy

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestRequestKeysRefusedAtLoad: a request key that would not decide as
// written is refused at load, naming the rule and what to do.
func TestRequestKeysRefusedAtLoad(t *testing.T) {
	rule := func(keys string) string {
		return `{"rules": [{"id": "r", "hosts": ["a.test"], "ports": [443], "inspect": true, ` + keys + `}]}`
	}
	tests := []struct{ name, data, want string }{
		{"mcp on 443 without inspect", `{"rules": [{"id": "r", "hosts": ["a.test"], "ports": [443], "mcp": {"tools": ["*"]}}]}`, `need "inspect": true`},
		{"llm on 443 without inspect", `{"rules": [{"id": "r", "hosts": ["a.test"], "ports": [8443, 443], "llm": {"api": "openai", "models": ["*"]}}]}`, `need "inspect": true`},
		{"mcp without tools", rule(`"mcp": {}`), "mcp.tools must list"},
		{"mcp unknown key", rule(`"mcp": {"tools": ["a"], "resources": ["b"]}`), `mcp has unknown key "resources"`},
		{"mcp and llm", rule(`"mcp": {"tools": ["a"]}, "llm": {"api": "openai", "models": ["m"]}`), "must not both be set"},
		{"llm unknown api", rule(`"llm": {"api": "gemini", "models": ["m"]}`), "llm.api must be one of"},
		{"llm no models", rule(`"llm": {"api": "openai"}`), "llm.models must list"},
		{"clamp without cap", rule(`"llm": {"api": "openai", "models": ["m"], "excess": "clamp"}`), "max_output_tokens, which is not set"},
		{"bad excess", rule(`"llm": {"api": "openai", "models": ["m"], "excess": "trim"}`), `llm.excess must be`},
		{"budget window", rule(`"llm": {"api": "openai", "models": ["m"], "budget": {"tokens": 5, "per": "1d"}}`), "llm.budget.per must be a duration"},
		{"budget tokens", rule(`"llm": {"api": "openai", "models": ["m"], "budget": {"tokens": 0, "per": "24h"}}`), "llm.budget.tokens must be positive"},
		{"max_body_bytes without a body condition", rule(`"max_body_bytes": 10`), "use max_request_bytes"},
		{"max_body_bytes over the cap", rule(`"mcp": {"tools": ["a"]}, "max_body_bytes": 1000000000`), "max_body_bytes must be"},
		{"negative max_request_bytes", rule(`"max_request_bytes": -1`), "max_request_bytes must be positive"},
		{"secret_patterns", rule(`"secret_patterns": "block"`), `secret_patterns must be "record" or "refuse"`},
		{"mcp on a deny rule", `{"rules": [{"id": "r", "hosts": ["a.test"], "ports": [80], "action": "deny", "mcp": {"tools": ["a"]}}]}`, "deny rule"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeBundle(t, "", map[string]string{"http.rego": miniHTTP, "data.json": tt.data})
			_, err := Check(context.Background(), os.DirFS(dir))
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), `rule "r"`) {
				t.Errorf("Check error = %v; want it to name rule r and contain %q", err, tt.want)
			}
		})
	}
}

// TestDecisionCarriesRuleOptions: an allow carries its rule's request
// keys; a rule deciding on bodies opens no opaque tunnel (its CONNECT is
// only allowed inspected); a rule without request keys carries none.
func TestDecisionCarriesRuleOptions(t *testing.T) {
	e := newTestEngine(t, Config{Dir: modulesWithData(t, `{"rules": [
		{"id": "tools", "hosts": ["mcp.test"], "ports": [443], "inspect": true, "mcp": {"tools": ["search_*"]}, "max_request_bytes": 4096},
		{"id": "model", "hosts": ["model.test"], "ports": [8080], "llm": {"api": "anthropic", "models": ["claude-*"], "max_output_tokens": 100, "budget": {"tokens": 1000, "per": "24h"}}},
		{"id": "plain", "hosts": ["plain.test"], "ports": [443]},
		{"id": "strict", "hosts": ["strict.test"], "ports": [443], "secret_patterns": "refuse"}
	]}`)})
	ctx := context.Background()
	decide := func(u string) Decision {
		f, err := ParseHTTP(KindHTTP, "POST", u, "")
		if err != nil {
			t.Fatal(err)
		}
		return e.Decide(ctx, Input{Facts: f})
	}
	d := decide("https://mcp.test/mcp")
	if !d.Allow || d.Options == nil || d.Options.MCP == nil || d.Options.MaxRequestBytes != 4096 || d.Options.MaxBodyBytes != DefaultMaxBodyBytes {
		t.Errorf("mcp rule decision %+v, options %+v", d, d.Options)
	}
	d = decide("http://model.test:8080/v1/messages")
	if o := d.Options; !d.Allow || o == nil || o.LLM == nil || o.LLM.Budget == nil || o.LLM.Budget.Per != 24*time.Hour || o.LLM.Budget.Tokens != 1000 {
		t.Errorf("llm rule decision %+v, options %+v", d, d.Options)
	}
	if d := decide("https://strict.test/x"); !d.Allow || d.Options == nil || d.Options.SecretPatterns != "refuse" || d.Options.MaxBodyBytes != 0 {
		t.Errorf("secret_patterns rule decision %+v, options %+v; want refuse, and no body read", d, d.Options)
	}
	if d := decide("https://plain.test/x"); !d.Allow || d.Options != nil {
		t.Errorf("plain rule decision %+v; want an allow without options", d)
	}
	for _, target := range []string{"model.test:8080"} {
		f, err := ParseConnect(target)
		if err != nil {
			t.Fatal(err)
		}
		if d := e.Decide(ctx, Input{Facts: f}); d.Allow {
			t.Errorf("CONNECT %s = %+v; a rule deciding on bodies must not open an opaque tunnel", target, d)
		}
	}
	f, _ := ParseConnect("mcp.test:443")
	if d := e.Decide(ctx, Input{Facts: f}); !d.Allow || !d.Inspect {
		t.Errorf("CONNECT mcp.test:443 = %+v; want allowed with inspection", d)
	}
}
