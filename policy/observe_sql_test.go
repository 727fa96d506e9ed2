package policy_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlfacts"
)

// TestObserveSQL: under an observing identity, a statement its profile
// refuses runs (would_deny), while the refusals of every profile, which
// the shipped bundle names policy.RuleSQLAlways (DO, SET of a setting the
// gate parses by, SET ROLE), are never lifted.
func TestObserveSQL(t *testing.T) {
	e, err := policy.New(context.Background(), policy.Config{EvalTimeout: 10 * time.Second}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	id := policy.Identity{ID: "analyst", Attributes: map[string]string{"sql_profile": "read_only"}, Mode: policy.ModeObserve}
	tests := []struct {
		sql      string
		observed bool
	}{
		{"INSERT INTO orders VALUES (1)", true},
		{"DELETE FROM orders", true},
		{"DO $$ BEGIN END $$", false},
		{"SET standard_conforming_strings = off", false},
		{"SET ROLE postgres", false},
	}
	// The login: allowed, and not read-only, or PostgreSQL would refuse
	// the writes observed here.
	login := &sqlfacts.Statement{Command: "connect", Database: "shop", Relations: []sqlfacts.Relation{}, Functions: []sqlfacts.Function{}}
	for _, mode := range []policy.Mode{policy.ModeEnforce, policy.ModeObserve} {
		id := id
		id.Mode = mode
		if d := e.Decide(context.Background(), policy.Input{Identity: id, Facts: login}); !d.Allow || d.ReadOnly != (mode == policy.ModeEnforce) {
			t.Errorf("login of a %s identity: %+v; want allowed, read-only only when enforcing", mode, d)
		}
	}
	for _, tt := range tests {
		sts, err := sqlfacts.Parse(tt.sql, sqlfacts.Options{Database: "shop"})
		if err != nil || len(sts) != 1 {
			t.Fatalf("Parse(%q) = %d statements, %v", tt.sql, len(sts), err)
		}
		d := e.Decide(context.Background(), policy.Input{Identity: id, Facts: sts[0]})
		switch {
		case tt.observed && (!d.Allow || d.WouldDeny == nil || d.WouldDeny.By != policy.ObservedByIdentity):
			t.Errorf("%s: %+v; want an allow observed by the identity", tt.sql, d)
		case !tt.observed && (d.Allow || d.WouldDeny != nil || d.Rule != policy.RuleSQLAlways):
			t.Errorf("%s: %+v; want a deny by rule %s, never observed", tt.sql, d, policy.RuleSQLAlways)
		}
	}
}
