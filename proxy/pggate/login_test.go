package pggate

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/pgtest"
)

// Every refused login leaves an audit record with the claimed user and
// database and never the password (issue 11 item 14).
func TestLoginFailuresAudited(t *testing.T) {
	f := startGate(t, sharedPG(t), nil)
	tests := []struct {
		name, dsn, user, db, reason string
	}{
		{"wrong password", f.dsn("agent-ro", "nope-"+passRW, "app"), "agent-ro", "app", "authentication_failed"},
		{"unknown identity", f.dsn("intruder", passRO, "app"), "intruder", "app", "unknown_identity"},
		{"database not allowed", f.dsn("agent-none", passRO, "app"), "agent-none", "app", "sql_no_profile"},
		{"options parameter", f.dsn("agent-ro", passRO, "app") + " options='-c standard_conforming_strings=off'", "agent-ro", "app", "startup_parameter_denied"},
		{"replication parameter", f.dsn("agent-ro", passRO, "app") + " replication=database", "agent-ro", "app", "startup_parameter_denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(f.audit.Records())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := pgconn.Connect(ctx, tt.dsn)
			if err == nil {
				c.Close(ctx)
				t.Fatal("Connect succeeded; want a refusal")
			}
			// The record is written before the refusal is sent.
			var got *audit.Record
			for _, r := range f.audit.Records()[before:] {
				if r.Decision == "deny" {
					got = &r
				}
			}
			if got == nil || got.Kind != "sql" || got.Identity != tt.user || got.Database != tt.db || got.Reason != tt.reason || got.Client == "" {
				t.Fatalf("audit records after a refused login = %+v; want kind sql, identity %q, database %q, reason %q, a client", f.audit.Records()[before:], tt.user, tt.db, tt.reason)
			}
			b, _ := json.Marshal(f.audit.Records()[before:])
			for _, pw := range []string{passRO, passRW} {
				if strings.Contains(string(b), pw) {
					t.Errorf("audit records %s carry a password", b)
				}
			}
		})
	}
}

// With the session caps left zero, one identity cannot take a quarter of
// the upstream's max_connections, let alone all of them (issue 12 item 5:
// 97 read_only sessions exhausted the server's slots) — not even with a
// burst of logins before the gate has seen the server.
func TestDefaultSessionCapBelowUpstreamMaxConnections(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{Settings: map[string]string{"max_connections": "12"}})
	f := startGate(t, srv, nil)
	dsn := f.dsn("agent-ro", passRO, "postgres")
	const burst = 8
	type result struct {
		c   *pgconn.PgConn
		err error
	}
	results := make(chan result, burst)
	for range burst {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := pgconn.Connect(ctx, dsn)
			results <- result{c, err}
		}()
	}
	admitted := 0
	for range burst {
		r := <-results
		if r.err == nil {
			admitted++
			t.Cleanup(func() { r.c.Close(context.Background()) })
			continue
		}
		var pe *pgconn.PgError
		if !errors.As(r.err, &pe) || pe.Code != "53300" {
			t.Errorf("login in a burst = %v; want success or 53300 too_many_connections", r.err)
		}
	}
	if admitted != 3 {
		t.Fatalf("a burst of %d logins of one identity with max_connections = 12 admitted %d; want 3 (a quarter)", burst, admitted)
	}
	var refused *audit.Record
	for _, r := range f.audit.Records() {
		if r.Reason == "session_limit" {
			refused = &r
		}
	}
	if refused == nil || refused.Identity != "agent-ro" || refused.Decision != "deny" {
		t.Errorf("audit records %+v; want deny session_limit for agent-ro", f.audit.Records())
	}
	// Another identity still gets in: the cap is per identity.
	connect(t, f.dsn("agent-rw", passRW, "postgres"))
}

func TestSessionCaps(t *testing.T) {
	f := startGate(t, sharedPG(t), func(c *Config) { c.MaxSessions, c.MaxSessionsPerIdentity = 3, 2 })
	refused := func(dsn string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pgconn.Connect(ctx, dsn)
		if err == nil {
			c.Close(ctx)
			t.Fatal("login past a session cap was admitted")
		}
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "53300" || !strings.Contains(pe.Message, "postgres.max_sessions") {
			t.Fatalf("login past a cap = %v; want 53300 naming the key", err)
		}
	}
	ro := f.dsn("agent-ro", passRO, "app")
	first := connect(t, ro)
	connect(t, ro)
	refused(ro)
	connect(t, f.dsn("agent-rw", passRW, "app"))
	refused(f.dsn("agent-rw", passRW, "app"))
	// A closed session gives its slot back.
	first.Close(ctxT(t))
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		f.gate.slots.mu.Lock()
		n := f.gate.slots.total
		f.gate.slots.mu.Unlock()
		if n == 2 {
			break
		}
		if i > 1000 {
			t.Fatalf("open sessions after a close = %d; want 2", n)
		}
		<-tick.C
	}
	connect(t, ro)
}
