package pggate

import (
	"strings"
	"testing"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/identity"
)

// TestObservingIdentityRunsRefusedStatements: the statements an observing
// identity's profile refuses run, each recorded as an allow with
// would_deny; the refusals of every profile (DO) stay refused.
func TestObservingIdentityRunsRefusedStatements(t *testing.T) {
	f := startGate(t, sharedPG(t), nil)
	v, err := testVerifiers()
	if err != nil {
		t.Fatal(err)
	}
	ids, err := identity.New(identity.Config{
		{ID: "agent-ro", SCRAMSHA256: v[0], Attributes: map[string]string{"sql_profile": "read_only"}, Mode: "observe"},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.gate.Reload(testEngine(t), ids)
	c := connect(t, f.dsn("agent-ro", passRO, "app"))
	rows(t, c, "INSERT INTO items VALUES (9024, 'observed')")
	r := f.audit.WaitRecord(t, func(r audit.Record) bool { return strings.HasPrefix(r.SQL, "INSERT INTO items") })
	if r.Decision != audit.DecisionAllow || r.WouldDeny != "write_denied" || r.ObservedBy != "identity" {
		t.Errorf("INSERT record %+v; want an allow with would_deny write_denied observed_by identity", r)
	}
	if got := rows(t, c, "SELECT note FROM items WHERE id = 9024"); len(got) != 1 || got[0][0] != "observed" {
		t.Errorf("the observed INSERT wrote %v; want its row", got)
	}
	rows(t, c, "DELETE FROM items WHERE id = 9024")
	wantQueryDenied(t, c, "DO $$ BEGIN END $$", "do_denied")
	r = f.audit.WaitRecord(t, func(r audit.Record) bool { return strings.HasPrefix(r.SQL, "DO") })
	if r.Decision != audit.DecisionDeny || r.WouldDeny != "" {
		t.Errorf("DO record %+v; want a deny without would_deny", r)
	}
}
