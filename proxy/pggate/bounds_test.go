package pggate

import (
	"strings"
	"testing"

	"github.com/egressd/egressd/policy"
)

// One query of many statements is denied as a whole with one audit record
// (issue 12 item 5: 116,000 statements wrote 15 MB of audit).
func TestTooManyStatementsDeniedWithOneRecord(t *testing.T) {
	f := startGate(t, sharedPG(t), func(c *Config) { c.MaxStatements = 10 })
	c := connect(t, f.dsn("agent-ro", passRO, "app"))
	tests := []struct {
		name, sql string
		allow     bool
	}{
		{"at the cap", strings.Repeat("SELECT 1;", 10), true},
		{"one past the cap", strings.Repeat("SELECT 1;", 11), false},
		{"ten thousand", strings.Repeat("SELECT 1;", 10000), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(f.audit.Records())
			_, err := c.Exec(ctxT(t), tt.sql).ReadAll()
			recs := f.audit.Records()[before:]
			if tt.allow {
				if err != nil || len(recs) != 10 {
					t.Fatalf("Exec(10 statements) = %v with %d audit records; want success and 10", err, len(recs))
				}
				return
			}
			wantDenied(t, err, string(policy.ReasonSQLTooManyStatements))
			if len(recs) != 1 || recs[0].Reason != string(policy.ReasonSQLTooManyStatements) || recs[0].Decision != "deny" {
				t.Fatalf("audit records for a denied %d-byte query = %+v; want one deny %s", len(tt.sql), recs, policy.ReasonSQLTooManyStatements)
			}
			// The extended protocol is bounded the same way.
			err = c.ExecParams(ctxT(t), tt.sql, nil, nil, nil, nil).Read().Err
			wantDenied(t, err, string(policy.ReasonSQLTooManyStatements))
		})
	}
}
