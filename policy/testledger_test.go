package policy

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"

	"go.uber.org/zap"
)

// memLedger is a TestLedger in memory.
type memLedger struct {
	passed   map[string]bool
	recorded []string
}

func (l *memLedger) Passed(digest string) bool { return l.passed[digest] }
func (l *memLedger) Record(digest string)      { l.recorded = append(l.recorded, digest) }

const failingTest = `package egress.http_test

import data.egress.http

test_wrong if http.decision.allow with input as {"host": "nope.test"}
`

const passingTest = `package egress.http_test

import data.egress.http

test_ok if http.decision.allow with input as {"host": "ok.test"}
`

// TestNewTestLedger: a load with a ledger skips the tests of exactly the
// bundle the ledger says passed (same digest as when they run), records
// a bundle whose tests pass, and never one whose tests fail.
func TestNewTestLedger(t *testing.T) {
	ctx := context.Background()
	failing := writeBundle(t, "", map[string]string{"http.rego": miniHTTP, "http_test.rego": failingTest})
	passing := writeBundle(t, "", map[string]string{"http.rego": miniHTTP, "http_test.rego": passingTest})

	// The failing bundle's digest, as a load that skips its tests names it.
	skipAll := &memLedger{passed: map[string]bool{}}
	srcs, err := readBundle(os.DirFS(failing))
	if err != nil {
		t.Fatal(err)
	}
	failingDigest := digestOf(srcs)
	skipAll.passed[failingDigest] = true

	tests := []struct {
		name    string
		dir     string
		ledger  *memLedger
		testErr bool // the load fails with a *TestError
		records bool // the ledger is told of the bundle
	}{
		{"failing, no ledger", failing, nil, true, false},
		{"failing, not passed", failing, &memLedger{}, true, false},
		{"failing, passed for another digest", failing, &memLedger{passed: map[string]bool{"sha256:other": true}}, true, false},
		{"failing, passed for its digest", failing, skipAll, false, false},
		{"passing, not passed", passing, &memLedger{}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Dir: tt.dir}
			if tt.ledger != nil {
				cfg.Tests = tt.ledger
			}
			e, err := New(ctx, cfg, zap.NewNop())
			var te *TestError
			if errors.As(err, &te) != tt.testErr || (err != nil && !tt.testErr) {
				t.Fatalf("New() error = %v; want a test failure: %v", err, tt.testErr)
			}
			if tt.ledger == nil {
				return
			}
			var want []string
			if tt.records {
				want = []string{e.Digest()}
			}
			if !slices.Equal(tt.ledger.recorded, want) {
				t.Errorf("recorded %q; want %q", tt.ledger.recorded, want)
			}
			if err != nil {
				return
			}
			if tt.dir == failing && e.Digest() != failingDigest {
				t.Errorf("Digest() with the tests skipped = %s; want the whole bundle's %s", e.Digest(), failingDigest)
			}
			in := Input{Facts: mustParse(t, "GET", "http://ok.test/")}
			if d := e.Decide(ctx, in); !d.Allow || d.Rule != "mini" {
				t.Errorf("Decide(ok.test) = %+v; want allowed by mini", d)
			}
		})
	}
}
