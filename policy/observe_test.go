package policy

import (
	"context"
	"os"
	"strings"
	"testing"
)

// observeRules: one rule observed, one enforced, one path rule observed
// (whose mode must not reach requests it does not name).
const observeRules = `"rules": [
  {"id": "open", "hosts": ["open.test"], "ports": [80, 443]},
  {"id": "watch", "hosts": ["watch.test"], "ports": [80], "action": "deny", "mode": "observe"},
  {"id": "hard", "hosts": ["hard.test"], "ports": [80], "action": "deny", "mode": "enforce"},
  {"id": "docs", "hosts": ["docs.test"], "ports": [80], "paths": ["/docs/**"], "mode": "observe"}
]`

// TestObserveMode is the table of issue 24 item 1: a deny with a liftable
// reason becomes an allow carrying would_deny where the rule it names, the
// identity or the bundle observes; the narrowest mode is named; a
// refusal of the request's facts (encoded separator, dot segment) is
// never lifted; an allow is left alone.
func TestObserveMode(t *testing.T) {
	enforcing := newTestEngine(t, Config{Dir: modulesWithData(t, `{`+observeRules+`}`)})
	observing := newTestEngine(t, Config{Dir: modulesWithData(t, `{"mode": "observe", `+observeRules+`}`)})
	plain := Identity{ID: "sbx"}
	watched := Identity{ID: "sbx", Mode: ModeObserve}
	tests := []struct {
		name   string
		bundle *Engine
		id     Identity
		url    string
		allow  bool
		reason Reason // the decision's (ReasonAllowed on an observed one)
		rule   string
		would  Reason // "" when not observed
		by     ObservedBy
	}{
		{"allowed stays as is", observing, watched, "http://open.test/", true, ReasonAllowed, "open", "", 0},
		{"rule observed", enforcing, plain, "http://watch.test/", true, ReasonAllowed, "watch", ReasonRuleDeny, ObservedByRule},
		{"rule enforced", enforcing, plain, "http://hard.test/", false, ReasonRuleDeny, "hard", "", 0},
		{"no rule, nothing observes", enforcing, plain, "http://else.test/", false, ReasonNoMatchingRule, "", "", 0},
		{"observed path rule does not name the miss", enforcing, plain, "http://docs.test/other", false, ReasonNoMatchingRule, "", "", 0},
		{"identity observed", enforcing, watched, "http://else.test/", true, ReasonAllowed, "", ReasonNoMatchingRule, ObservedByIdentity},
		{"identity over an enforced rule", enforcing, watched, "http://hard.test/", true, ReasonAllowed, "hard", ReasonRuleDeny, ObservedByIdentity},
		{"identity: encoded separator", enforcing, watched, "http://open.test/a%2fb", false, "encoded_separator", "", "", 0},
		{"identity: encoded dot", enforcing, watched, "http://open.test/a/%2e%2e/b", false, "encoded_dot", "", "", 0},
		{"bundle observed", observing, plain, "http://else.test/", true, ReasonAllowed, "", ReasonNoMatchingRule, ObservedByBundle},
		{"bundle over an enforced rule", observing, plain, "http://hard.test/", true, ReasonAllowed, "hard", ReasonRuleDeny, ObservedByBundle},
		{"rule is narrower than bundle", observing, watched, "http://watch.test/", true, ReasonAllowed, "watch", ReasonRuleDeny, ObservedByRule},
		{"identity is narrower than bundle", observing, watched, "http://else.test/", true, ReasonAllowed, "", ReasonNoMatchingRule, ObservedByIdentity},
		{"bundle: encoded separator", observing, plain, "http://open.test/a%2fb", false, "encoded_separator", "", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Twice: the second answer is the cached one.
			for range 2 {
				d := tt.bundle.Decide(context.Background(), Input{Identity: tt.id, Facts: mustParse(t, "GET", tt.url)})
				var would Reason
				var by ObservedBy
				if d.WouldDeny != nil {
					would, by = d.WouldDeny.Reason, d.WouldDeny.By
				}
				if d.Allow != tt.allow || d.Reason != tt.reason || d.Rule != tt.rule || would != tt.would || by != tt.by {
					t.Fatalf("Decide(%s) = %+v, would_deny %q by %q; want allow=%v reason=%s rule=%q would_deny %q by %q",
						tt.url, d, would, by, tt.allow, tt.reason, tt.rule, tt.would, tt.by)
				}
				if d.Credentials != nil {
					t.Errorf("Decide(%s) carries credentials %v; an observed allow adds none", tt.url, d.Credentials)
				}
			}
		})
	}
}

// TestObserveConnect: an observed CONNECT is an opaque tunnel that must
// carry TLS (the SNI check binds it to its host), never an inspected one.
func TestObserveConnect(t *testing.T) {
	e := newTestEngine(t, Config{Dir: modulesWithData(t, `{"mode": "observe", `+observeRules+`}`)})
	for _, target := range []string{"else.test:443", "docs.test:80", "watch.test:80"} {
		f, err := ParseConnect(target)
		if err != nil {
			t.Fatal(err)
		}
		d := e.Decide(context.Background(), Input{Facts: f})
		if !d.Allow || d.WouldDeny == nil || !d.TLS || d.Inspect {
			t.Errorf("Decide(CONNECT %s) = %+v; want an observed allow with tls and without inspect", target, d)
		}
	}
}

// TestObserveCacheKeysMode: the identity's mode is part of the decision
// cache key, so an observed answer never serves an enforcing identity of
// the same id (a reload may change only the mode).
func TestObserveCacheKeysMode(t *testing.T) {
	e := newTestEngine(t, Config{Dir: modulesWithData(t, `{`+observeRules+`}`)})
	f := mustParse(t, "GET", "http://else.test/")
	ctx := context.Background()
	if d := e.Decide(ctx, Input{Identity: Identity{ID: "x", Mode: ModeObserve}, Facts: f}); !d.Allow {
		t.Fatalf("observing identity: %+v; want an observed allow", d)
	}
	if d := e.Decide(ctx, Input{Identity: Identity{ID: "x"}, Facts: f}); d.Allow || d.WouldDeny != nil {
		t.Errorf("enforcing identity after the observing one: %+v; want deny no_matching_rule", d)
	}
}

// TestObservedDecideAllocatesNothing: a cached observed decision costs what
// any cached decision does.
func TestObservedDecideAllocatesNothing(t *testing.T) {
	e := newTestEngine(t, Config{Dir: modulesWithData(t, `{"mode": "observe", `+observeRules+`}`)})
	in := Input{Identity: Identity{ID: "sbx"}, Facts: mustParse(t, "GET", "http://else.test/x")}
	ctx := context.Background()
	e.Decide(ctx, in)
	allocs := testing.AllocsPerRun(200, func() {
		if d := e.Decide(ctx, in); !d.Allow || d.WouldDeny == nil {
			t.Fatalf("cached Decide = %+v; want an observed allow", d)
		}
	})
	if allocs != 0 {
		t.Errorf("cached observed Decide allocates %v times per call; want 0", allocs)
	}
}

// TestObserveBatch: in an MCP batch, the call an observed rule would have
// refused speaks for the batch, so the record says would_deny.
func TestObserveBatch(t *testing.T) {
	dir := modulesWithData(t, `{"rules": [
		{"id": "tools", "hosts": ["mcp.test"], "ports": [443], "inspect": true, "mcp": {"tools": ["search_*"]}, "mode": "observe"}
	]}`)
	d := &PreDial{Engine: newTestEngine(t, Config{Dir: dir}), Floor: openFloor{}}
	for _, body := range []string{
		mcpCall(1, "delete_repo", `{}`),
		"[" + mcpCall(1, "search_a", `{}`) + "," + mcpCall(2, "delete_repo", `{}`) + "]",
	} {
		out := d.DecideInspected(context.Background(), Identity{}, "mcp.test:443", HTTPRequest{
			Method: "POST", Target: "/mcp", HostHeader: "mcp.test:443", Body: strings.NewReader(body), ContentType: "application/json",
		})
		if w := out.Decision.WouldDeny; !out.Decision.Allow || w == nil || w.Reason != ReasonMCPToolDenied || w.By != ObservedByRule || out.Decision.Rule != "tools" {
			t.Errorf("%s: decision %+v (would_deny %+v); want allowed, would_deny %s by rule tools", body, out.Decision, w, ReasonMCPToolDenied)
		}
	}
}

// TestModeRefusedAtLoad: a mode other than enforce or observe is refused,
// naming the rule or data.mode.
func TestModeRefusedAtLoad(t *testing.T) {
	tests := []struct{ name, data, want string }{
		{"rule", `{"rules": [{"id": "r", "hosts": ["a.test"], "ports": [80], "mode": "watch"}]}`, `rules[0].mode must be "enforce" or "observe", got "watch" (rule "r")`},
		{"rule not a string", `{"rules": [{"id": "r", "hosts": ["a.test"], "ports": [80], "mode": true}]}`, `rules[0].mode: want a string, got a bool (rule "r")`},
		{"bundle", `{"mode": "Observe", "rules": []}`, `data.json: mode must be "enforce" or "observe", got "Observe"`},
		{"bundle not a string", `{"mode": {"observe": true}}`, `data.json: mode must be "enforce" or "observe", got an object`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeBundle(t, "", map[string]string{"http.rego": miniHTTP, "data.json": tt.data})
			_, err := Check(context.Background(), os.DirFS(dir))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Check error = %v; want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": ModeEnforce, "enforce": ModeEnforce, "observe": ModeObserve} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseMode("OBSERVE"); err == nil {
		t.Errorf("ParseMode(OBSERVE) = nil error; want one")
	}
}

func TestObservedByText(t *testing.T) {
	for _, by := range []ObservedBy{ObservedByRule, ObservedByIdentity, ObservedByBundle} {
		text, _ := by.MarshalText()
		var got ObservedBy
		if err := got.UnmarshalText(text); err != nil || got != by {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", text, got, err, by)
		}
	}
	var b ObservedBy
	if err := b.UnmarshalText([]byte("")); err == nil {
		t.Errorf("UnmarshalText(\"\") = nil error; want one")
	}
}
