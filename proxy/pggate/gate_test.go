package pggate

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/policy"
)

func rows(t *testing.T, c *pgconn.PgConn, sql string) [][]string {
	t.Helper()
	res, err := c.Exec(ctxT(t), sql).ReadAll()
	if err != nil {
		t.Fatalf("Exec(%q) = %v", sql, err)
	}
	var out [][]string
	for _, r := range res {
		for _, row := range r.Rows {
			var s []string
			for _, v := range row {
				s = append(s, string(v))
			}
			out = append(out, s)
		}
	}
	return out
}

func wantDenied(t *testing.T, err error, reason string) {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		t.Fatalf("error = %v; want PgError 42501 egressd: denied: %s", err, reason)
	}
	if pe.Code != "42501" || pe.Message != "egressd: denied: "+reason {
		t.Fatalf("error = %s %q; want 42501 %q", pe.Code, pe.Message, "egressd: denied: "+reason)
	}
}

// wantQueryDenied runs sql as a simple Query on c and wants it denied with
// reason.
func wantQueryDenied(t *testing.T, c *pgconn.PgConn, sql, reason string) {
	t.Helper()
	_, err := c.Exec(ctxT(t), sql).ReadAll()
	wantDenied(t, err, reason)
}

func TestAllowedQueriesMatchDirect(t *testing.T) {
	pg := sharedPG(t)
	f := startGate(t, pg, nil)
	gate := connect(t, f.dsn("agent-ro", passRO, "app"))
	direct := connect(t, pg.DSN("app"))
	for _, q := range []string{
		"SELECT id, name FROM users ORDER BY id",
		"SELECT lower(name), length(name) FROM users WHERE id > 1 ORDER BY 1",
		"SELECT count(*), max(id) FROM users",
		"WITH u AS (SELECT * FROM users) SELECT name FROM u ORDER BY name",
		"SELECT E'a\\'b', 'it''s', $$dollar$$",
	} {
		got, want := rows(t, gate, q), rows(t, direct, q)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("gate %q = %v; direct = %v", q, got, want)
		}
	}
}

func TestExtendedProtocolWithPgx(t *testing.T) {
	pg := sharedPG(t)
	f := startGate(t, pg, nil)
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, f.dsn("agent-ro", passRO, "app"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var name string
	if err := conn.QueryRow(ctx, "SELECT name FROM users WHERE id = $1", 2).Scan(&name); err != nil || name != "grace" {
		t.Fatalf("QueryRow = %q, %v; want grace", name, err)
	}
	_, err = conn.Exec(ctx, "SELECT pg_read_file($1)", "/etc/passwd")
	wantDenied(t, err, "function_not_allowed")
	if err := conn.QueryRow(ctx, "SELECT name FROM users WHERE id = $1", 3).Scan(&name); err != nil || name != "edsger" {
		t.Fatalf("QueryRow after deny = %q, %v; want edsger", name, err)
	}
	// A batch pipelines several Parse/Bind/Execute before one Sync.
	b := &pgx.Batch{}
	b.Queue("SELECT name FROM users WHERE id = $1", 1)
	b.Queue("SELECT count(*) FROM users WHERE id > $1", 0)
	br := conn.SendBatch(ctx, b)
	var n int64
	if err := br.QueryRow().Scan(&name); err != nil || name != "ada" {
		t.Fatalf("batch row 1 = %q, %v", name, err)
	}
	if err := br.QueryRow().Scan(&n); err != nil || n != 3 {
		t.Fatalf("batch row 2 = %d, %v", n, err)
	}
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestDangerousConstructsDenied(t *testing.T) {
	pg := sharedPG(t)
	f := startGate(t, pg, nil)
	tests := []struct {
		name, user, pass, sql, reason string
	}{
		{"write in read_only", "agent-ro", passRO, "INSERT INTO items VALUES (9, 'x')", "write_denied"},
		{"other schema", "agent-ro", passRO, "SELECT * FROM private.secrets", "table_not_allowed"},
		{"catalog", "agent-ro", passRO, "SELECT * FROM pg_authid", "table_not_allowed"},
		{"pg_read_file", "agent-ro", passRO, "SELECT pg_read_file('/etc/passwd')", "function_not_allowed"},
		{"pg_ls_dir", "agent-ro", passRO, "SELECT pg_ls_dir('.')", "function_not_allowed"},
		{"lo_import", "agent-ro", passRO, "SELECT lo_import('/etc/passwd')", "function_not_allowed"},
		{"dblink", "agent-ro", passRO, "SELECT * FROM dblink('host=x', 'select 1') AS t(a int)", "function_not_allowed"},
		{"pg_terminate_backend", "agent-ro", passRO, "SELECT pg_terminate_backend(1)", "function_not_allowed"},
		{"set_config", "agent-ro", passRO, "SELECT set_config('role', 'x', false)", "set_role_denied"},
		{"nextval", "agent-ro", passRO, "SELECT nextval('s')", "write_denied"},
		{"pg_sleep", "agent-ro", passRO, "SELECT pg_sleep(10)", "function_not_allowed"},
		{"query_to_xml", "agent-ro", passRO, "SELECT query_to_xml('select * from private.secrets', true, true, '')", "function_not_allowed"},
		{"for update", "agent-ro", passRO, "SELECT * FROM users FOR UPDATE", "locking_denied"},
		{"copy table out", "agent-ro", passRO, "COPY users TO STDOUT", "copy_table_denied"},
		{"explain analyze write", "agent-ro", passRO, "EXPLAIN ANALYZE DELETE FROM users WHERE id = 1", "write_denied"},
		{"copy program", "agent-rw", passRW, "COPY users FROM PROGRAM 'id'", "copy_program_denied"},
		{"copy server file", "agent-rw", passRW, "COPY users TO '/tmp/x'", "copy_file_denied"},
		{"do", "agent-rw", passRW, "DO $$BEGIN PERFORM 1; END$$", "do_denied"},
		{"call", "agent-rw", passRW, "CALL p()", "call_denied"},
		{"load", "agent-rw", passRW, "LOAD 'plpgsql'", "load_denied"},
		{"alter system", "agent-rw", passRW, "ALTER SYSTEM SET work_mem = '1GB'", "alter_system_denied"},
		{"create extension", "agent-rw", passRW, "CREATE EXTENSION dblink", "create_extension_denied"},
		{"create server", "agent-rw", passRW, "CREATE SERVER s FOREIGN DATA WRAPPER w", "create_server_denied"},
		{"create subscription", "agent-rw", passRW, "CREATE SUBSCRIPTION s CONNECTION 'x' PUBLICATION p", "create_subscription_denied"},
		{"set role", "agent-rw", passRW, "SET ROLE postgres", "set_role_denied"},
		{"set session authorization", "agent-rw", passRW, "SET SESSION AUTHORIZATION postgres", "set_role_denied"},
		{"standard_conforming_strings", "agent-rw", passRW, "SET standard_conforming_strings = off", "set_denied"},
		{"client_encoding", "agent-rw", passRW, "SET client_encoding = 'SJIS'", "set_denied"},
		{"ddl", "agent-rw", passRW, "CREATE TABLE t2 (a int)", "ddl_denied"},
		{"truncate", "agent-rw", passRW, "TRUNCATE items", "truncate_denied"},
		{"update without where", "agent-rw", passRW, "UPDATE items SET note = 'x'", "missing_where"},
		{"delete without where", "agent-rw", passRW, "DELETE FROM items", "missing_where"},
		{"merge outside allow list", "agent-rw", passRW, "MERGE INTO private.secrets s USING users u ON false WHEN NOT MATCHED THEN INSERT VALUES (u.name)", "write_denied"},
		{"whole query denied", "agent-rw", passRW, "SELECT 1; DELETE FROM items", "missing_where"},
		{"parse error", "agent-ro", passRO, "SELEC 1", "sql_parse_error"},
		{"100k terms", "agent-ro", passRO, "SELECT 1" + strings.Repeat("+1", 100000), "sql_too_complex"},
		{"deep parens", "agent-ro", passRO, "SELECT " + strings.Repeat("(", 50000) + "1" + strings.Repeat(")", 50000), "sql_too_complex"},
	}
	conns := map[string]*pgconn.PgConn{
		"agent-ro": connect(t, f.dsn("agent-ro", passRO, "app")),
		"agent-rw": connect(t, f.dsn("agent-rw", passRW, "app")),
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := conns[tt.user]
			wantQueryDenied(t, c, tt.sql, tt.reason)
			// Extended protocol: the denied Parse errors, the rest is
			// skipped to Sync.
			err := c.ExecParams(ctxT(t), tt.sql, nil, nil, nil, nil).Read().Err
			if !strings.Contains(tt.sql, ";") {
				wantDenied(t, err, tt.reason)
			}
			if got := rows(t, c, "SELECT 1"); len(got) != 1 || got[0][0] != "1" {
				t.Fatalf("next query on the session = %v; want [[1]]", got)
			}
		})
	}
	if got := rows(t, connect(t, pg.DSN("app")), "SELECT count(*) FROM items"); got[0][0] != "0" {
		t.Errorf("items rows after denials = %s; want 0", got[0][0])
	}
}

func TestDenyInsideTransactionCommitsNothing(t *testing.T) {
	pg := sharedPG(t)
	f := startGate(t, pg, nil)
	c := connect(t, f.dsn("agent-rw", passRW, "app"))
	ctx := ctxT(t)
	for _, q := range []string{"BEGIN", "INSERT INTO items VALUES (100, 'before deny')"} {
		if _, err := c.Exec(ctx, q).ReadAll(); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	_, err := c.Exec(ctx, "DELETE FROM items").ReadAll()
	wantDenied(t, err, "missing_where")
	if c.TxStatus() != 'E' {
		t.Errorf("TxStatus after deny in transaction = %c; want E", c.TxStatus())
	}
	res, err := c.Exec(ctx, "COMMIT").ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if tag := res[0].CommandTag.String(); tag != "ROLLBACK" {
		t.Errorf("COMMIT tag = %q; want ROLLBACK", tag)
	}
	if got := rows(t, connect(t, pg.DSN("app")), "SELECT count(*) FROM items WHERE id = 100"); got[0][0] != "0" {
		t.Errorf("rows committed after a denied statement = %s; want 0", got[0][0])
	}
	// The session is usable afterwards, outside a transaction.
	if _, err := c.Exec(ctx, "INSERT INTO items VALUES (101, 'after'); DELETE FROM items WHERE id = 101").ReadAll(); err != nil {
		t.Fatal(err)
	}
}

func TestTransactionsCommit(t *testing.T) {
	pg := sharedPG(t)
	f := startGate(t, pg, nil)
	c := connect(t, f.dsn("agent-rw", passRW, "app"))
	ctx := ctxT(t)
	if _, err := c.Exec(ctx, "BEGIN; INSERT INTO items VALUES (200, 'a'); UPDATE items SET note = 'b' WHERE id = 200; COMMIT").ReadAll(); err != nil {
		t.Fatal(err)
	}
	direct := connect(t, pg.DSN("app"))
	if got := rows(t, direct, "SELECT note FROM items WHERE id = 200"); len(got) != 1 || got[0][0] != "b" {
		t.Errorf("committed row = %v; want [[b]]", got)
	}
	rows(t, direct, "DELETE FROM items WHERE id = 200")
}

func TestCancel(t *testing.T) {
	pg := sharedPG(t)
	f := startGate(t, pg, nil)
	c := connect(t, f.dsn("agent-ro", passRO, "app"))
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(context.Background(), "SELECT count(*) FROM generate_series(1, 5000000000)").ReadAll()
		done <- err
	}()
	// The CancelRequest goes to the gate with the gate-issued key; a cancel
	// that arrives before the query starts is a no-op, so repeat it.
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "57014" {
				t.Fatalf("cancelled query error = %v; want 57014 query_canceled", err)
			}
			if got := rows(t, c, "SELECT 1"); got[0][0] != "1" {
				t.Fatalf("query after cancel = %v", got)
			}
			return
		case <-tick.C:
			if err := c.CancelRequest(ctxT(t)); err != nil {
				t.Fatalf("CancelRequest: %v", err)
			}
		}
	}
}

// denyAll is a Decider that refuses everything, standing in for a reloaded
// bundle.
type denyAll struct{}

func (denyAll) Decide(context.Context, policy.Input) policy.Decision {
	return policy.Decision{Reason: "reloaded_deny", Policy: "sha256:reloaded"}
}

func (denyAll) Digest() string { return "sha256:reloaded" }

func TestUpdateSwapsEngineForLiveSessions(t *testing.T) {
	f := startGate(t, sharedPG(t), nil)
	c := connect(t, f.dsn("agent-ro", passRO, "app"))
	rows(t, c, "SELECT id FROM users")
	f.gate.Reload(denyAll{}, testIdentities(t))
	wantQueryDenied(t, c, "SELECT id FROM users", "reloaded_deny")
}

// A reload reaches sessions already open: a removed identity loses its
// session at its next message, a changed profile applies to the next
// statement.
func TestUpdateResolvesIdentityForLiveSessions(t *testing.T) {
	f := startGate(t, sharedPG(t), nil)
	v, err := testVerifiers()
	if err != nil {
		t.Fatal(err)
	}
	rw := v[1]
	ids := func(c identity.Config) *identity.Store {
		st, err := identity.New(c)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	t.Run("profile narrowed", func(t *testing.T) {
		c := connect(t, f.dsn("agent-rw", passRW, "app"))
		rows(t, c, "UPDATE users SET name = name WHERE id = -1")
		f.gate.Reload(testEngine(t), ids(identity.Config{
			{ID: "agent-rw", SCRAMSHA256: rw, Attributes: map[string]string{"sql_profile": "read_only"}},
		}))
		wantQueryDenied(t, c, "UPDATE users SET name = name WHERE id = -1", "write_denied")
		rows(t, c, "SELECT id FROM users WHERE id = -1")
	})

	t.Run("upstream no longer allowed", func(t *testing.T) {
		f := startGate(t, sharedPG(t), nil)
		var fl switchFloor
		// Set before any session exists; sessions read it after Update.
		f.gate.deps.Floor = &fl
		c := connect(t, f.dsn("agent-ro", passRO, "app"))
		rows(t, c, "SELECT id FROM users WHERE id = -1")
		fl.deny.Store(true)
		f.gate.Reload(testEngine(t), testIdentities(t))
		wantQueryDenied(t, c, "SELECT id FROM users WHERE id = -1", "internal_denied")
	})

	t.Run("password rotated", func(t *testing.T) {
		f.gate.Reload(testEngine(t), testIdentities(t))
		c := connect(t, f.dsn("agent-rw", passRW, "app"))
		rows(t, c, "SELECT id FROM users WHERE id = -1")
		rotated, err := identity.SCRAMVerifier("n3w-"+passRW, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.gate.Reload(testEngine(t), ids(identity.Config{
			{ID: "agent-rw", SCRAMSHA256: rotated, Attributes: map[string]string{"sql_profile": "read_write"}},
		}))
		_, err = c.Exec(ctxT(t), "SELECT id FROM users WHERE id = -1").ReadAll()
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "28000" {
			t.Fatalf("query after the password was rotated = %v; want FATAL 28000", err)
		}
	})

	t.Run("identity removed", func(t *testing.T) {
		f.gate.Reload(testEngine(t), testIdentities(t))
		c := connect(t, f.dsn("agent-rw", passRW, "app"))
		rows(t, c, "SELECT id FROM users WHERE id = -1")
		f.gate.Reload(testEngine(t), ids(identity.Config{}))
		_, err := c.Exec(ctxT(t), "SELECT id FROM users WHERE id = -1").ReadAll()
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "28000" || pe.Message != "egressd: denied: identity_revoked" {
			t.Fatalf("query after the identity was removed = %v; want FATAL 28000 egressd: denied: identity_revoked", err)
		}
		if !c.IsClosed() {
			select {
			case <-c.CleanupDone():
			case <-time.After(5 * time.Second):
				t.Error("session still open after its identity was removed")
			}
		}
	})
}

// switchFloor denies every address once deny is set, standing in for an
// `internal:` allowance removed by a reload.
type switchFloor struct{ deny atomic.Bool }

func (f *switchFloor) Check(netip.Addr, uint16) error {
	if f.deny.Load() {
		return &policy.DenyError{Reason: "internal_denied"}
	}
	return nil
}
