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
		reason string
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
