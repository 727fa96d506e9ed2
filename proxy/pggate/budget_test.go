package pggate

import (
	"testing"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/policy"
)

// TestAuditBudgetRefusesStatements (issue 11 item 19): the gate appends
// through the same audit.Meter as the proxy, so an identity past its audit
// budget is refused audit_budget_exceeded, not audit_unavailable, and
// another identity's statements still run.
func TestAuditBudgetRefusesStatements(t *testing.T) {
	pg := sharedPG(t)
	f := startGateAudit(t, pg, nil, func(a *audittest.Recorder) audit.Appender {
		// A bucket of 6 records that all but never refills.
		m := audit.NewMeter(a, audit.Config{IdentityRate: 0.001, IdentityBurst: 6})
		t.Cleanup(func() { m.Close() })
		return m
	})
	ro := connect(t, f.dsn("agent-ro", passRO, "app"))
	var err error
	for i := 0; i < 10 && err == nil; i++ {
		_, err = ro.Exec(ctxT(t), "SELECT 1").ReadAll()
	}
	wantDenied(t, err, string(policy.ReasonAuditBudgetExceeded))

	rw := connect(t, f.dsn("agent-rw", passRW, "app"))
	if _, err := rw.Exec(ctxT(t), "SELECT 1").ReadAll(); err != nil {
		t.Fatalf("agent-rw SELECT 1 after agent-ro spent its budget = %v; want it to run", err)
	}
}
