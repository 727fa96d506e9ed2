package policy

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
)

// testEvalTimeout replaces the 100ms default in tests: under -race on a
// loaded machine an evaluation can take longer, and a timeout deny would
// read as a wrong decision. TestDecideFailsClosed sets its own.
const testEvalTimeout = 10 * time.Second

func newTestEngine(t testing.TB, cfg Config) *Engine {
	t.Helper()
	if cfg.EvalTimeout == 0 {
		cfg.EvalTimeout = testEvalTimeout
	}
	e, err := New(context.Background(), cfg, zap.NewNop())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

func TestDecideDefaultBundle(t *testing.T) {
	e := newTestEngine(t, Config{})
	tests := []struct {
		name   string
		method string
		url    string
		allow  bool
		reason Reason
	}{
		{"pypi", "GET", "https://pypi.org/simple/requests/", true, "allowed"},
		{"github read", "GET", "https://api.github.com/repos/a/b", true, "allowed"},
		{"github write", "POST", "https://api.github.com/repos/a/b/issues", false, "no_matching_rule"},
		{"unknown", "GET", "https://example.com/", false, "no_matching_rule"},
		{"encoded slash", "GET", "https://api.github.com/repos/a%2fb", false, "encoded_separator"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := ParseHTTP(KindHTTP, tt.method, tt.url, "")
			if err != nil {
				t.Fatalf("ParseHTTP: %v", err)
			}
			d := e.Decide(context.Background(), Input{Facts: f})
			if d.Allow != tt.allow || d.Reason != tt.reason {
				t.Errorf("Decide(%s %s) = %+v; want allow=%v reason=%s", tt.method, tt.url, d, tt.allow, tt.reason)
			}
		})
	}
}

// slowModule never finishes within a test: only a cancel stops it.
const slowModule = `package egress.http

decision := {"allow": true, "reason": "allowed", "rule": "slow"} if {
	some i in numbers.range(1, 30000)
	some j in numbers.range(1, 30000)
	i * j == -1
}
`

// TestDecideStopsWhenCallerCancels: the evaluation watches the caller's
// context as well as its own timeout, and a cancel left armed by one
// evaluation never stops the next. A caller that gave up (its client left)
// is denied client_closed, not policy_error: nothing failed in the policy.
func TestDecideStopsWhenCallerCancels(t *testing.T) {
	dir := writeBundle(t, "", map[string]string{"http.rego": slowModule})
	e := newTestEngine(t, Config{Dir: dir, CacheSize: -1})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	in := Input{Facts: mustParse(t, "GET", "https://ok.test/")}
	if d := e.Decide(ctx, in); d.Allow || d.Reason != ReasonClientClosed {
		t.Errorf("Decide(cancelled) = %+v; want deny %s", d, ReasonClientClosed)
	}
	quick := writeBundle(t, "", map[string]string{"http.rego": "package egress.http\n\ndecision := {\"allow\": true, \"reason\": \"allowed\", \"rule\": \"q\"}\n"})
	e = newTestEngine(t, Config{Dir: quick, CacheSize: -1})
	for range 100 {
		if d := e.Decide(context.Background(), in); !d.Allow {
			t.Fatalf("Decide = %+v; want allow by q", d)
		}
	}
}
