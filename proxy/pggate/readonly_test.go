package pggate

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/internal/pgtest"
)

// udfDB is a database on the shared server for the tests of functions the
// facts must reach: public.app_cents(int) is allowed by qualified name in
// udfProfile (see oracleEngine) and writes a row to public.calls, so a
// write PostgreSQL refuses in a read-only session is witnessed by the
// table staying empty; public.app_fmt(int) is a pure one, app_fmt(text)
// turns default_transaction_read_only off where no fact can see it. bump and bump_check
// count their calls in public.bumps and are reached only through a domain
// CHECK (positive, inside the composite boxed, inside nest's row type), a
// view (v_bump, and v_outer over it) or a row-level security policy
// (guarded).
var udfDB = sync.OnceValue(func() error {
	pg := shared
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pg.Exec(ctx, "postgres", "CREATE DATABASE udf"); err != nil {
		return err
	}
	return pg.Exec(ctx, "udf", `
		CREATE TABLE calls (fn text);
		CREATE FUNCTION app_cents(n int) RETURNS int LANGUAGE sql AS $$ INSERT INTO calls VALUES ('app_cents') RETURNING n $$;
		CREATE FUNCTION app_fmt(n int) RETURNS text LANGUAGE sql AS $$ SELECT n::text $$;
		CREATE FUNCTION app_fmt(t text) RETURNS text LANGUAGE plpgsql AS $$ BEGIN PERFORM set_config('default_transaction_read_only', 'off', false); RETURN t; END $$;
		CREATE TABLE bumps (fn text);
		CREATE FUNCTION bump_check(n int) RETURNS bool LANGUAGE plpgsql AS $$ BEGIN INSERT INTO bumps VALUES ('bump_check'); RETURN n > 0; END $$;
		CREATE DOMAIN positive AS int CHECK (bump_check(VALUE));
		CREATE TYPE boxed AS (x positive);
		CREATE TABLE nest (b boxed);
		CREATE FUNCTION bump() RETURNS int LANGUAGE plpgsql AS $$ BEGIN INSERT INTO bumps VALUES ('bump'); RETURN 1; END $$;
		CREATE VIEW v_bump AS SELECT bump() AS n;
		CREATE VIEW v_outer AS SELECT n FROM v_bump;
		CREATE TABLE guarded (a int);
		INSERT INTO guarded VALUES (1);
		ALTER TABLE guarded ENABLE ROW LEVEL SECURITY;
		CREATE POLICY p ON guarded USING (bump() = 1);`)
})

// startUDFGate runs a gate on the shared server deciding with the oracle's
// engine, with the identity agent-udf of udfProfile (password passRO).
func startUDFGate(t *testing.T, mod func(*Config)) *fixture {
	t.Helper()
	pg := sharedPG(t)
	if err := udfDB(); err != nil {
		t.Fatalf("udf database: %v", err)
	}
	v, err := testVerifiers()
	if err != nil {
		t.Fatal(err)
	}
	ids, err := identity.New(identity.Config{{ID: "agent-udf", SCRAMSHA256: v[0], Attributes: map[string]string{"sql_profile": udfProfile}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PGGATE_TEST_PASSWORD", pgtest.SuperPassword)
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Upstream = fmt.Sprintf("postgres://%s@%s/?sslmode=disable", pgtest.SuperUser, pg.Addr())
	cfg.PasswordEnv = "PGGATE_TEST_PASSWORD"
	if mod != nil {
		mod(&cfg)
	}
	a := &audittest.Recorder{}
	var d net.Dialer
	g, err := New(cfg, Deps{Engine: oracleEngine(t), Identities: ids, Audit: a, Dial: d.DialContext})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &fixture{gate: g, addr: pgtest.ServeGate(t, g), audit: a, srv: pg}
}

// TestReadOnlyPinHoldsAgainstEveryForm is the class of item 7 of issue
// 21: a session of a profile that may write nothing is started with
// default_transaction_read_only on, and no form of changing a setting
// undoes it. For each form, run as a read-only identity through a real
// PostgreSQL, the form is denied or changes nothing, and the write that
// follows (an allowed user function that inserts) fails in PostgreSQL:
// public.calls stays empty and the session still reports read-only.
func TestReadOnlyPinHoldsAgainstEveryForm(t *testing.T) {
	f := startUDFGate(t, nil)
	super := connect(t, f.srv.DSN("udf"))
	tests := []struct {
		name string
		// steps run in order, each a simple Query; their errors are the
		// point, not failures.
		steps []string
	}{
		{"none", nil},
		{"set off", []string{"SET default_transaction_read_only = off"}},
		{"set session", []string{"SET SESSION default_transaction_read_only TO false"}},
		{"set local", []string{"BEGIN", "SET LOCAL default_transaction_read_only = off", "SET LOCAL transaction_read_only = off"}},
		{"reset", []string{"RESET default_transaction_read_only"}},
		{"reset all", []string{"RESET ALL"}},
		{"discard all", []string{"DISCARD ALL"}},
		{"set default", []string{"SET default_transaction_read_only TO DEFAULT"}},
		{"set_config", []string{"SELECT set_config('default_transaction_read_only', 'off', false)"}},
		{"set_config local", []string{"BEGIN", "SELECT set_config('transaction_read_only', 'off', true)"}},
		{"set_config case", []string{"SELECT set_config('Default_Transaction_Read_Only', 'off', false)"}},
		{"set transaction_read_only", []string{"SET transaction_read_only = off"}},
		{"session characteristics", []string{"SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE"}},
		{"session characteristics multi", []string{"SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED, READ WRITE"}},
		{"set transaction", []string{"BEGIN", "SET TRANSACTION READ WRITE"}},
		{"begin read write", []string{"BEGIN READ WRITE"}},
		{"begin isolation read write", []string{"BEGIN ISOLATION LEVEL SERIALIZABLE, READ WRITE"}},
		{"start transaction read write", []string{"START TRANSACTION READ WRITE"}},
		{"begin read only", []string{"BEGIN READ ONLY"}},
		{"same query", []string{"SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE; SELECT public.app_cents(1)"}},
		{"begin read write same query", []string{"BEGIN READ WRITE; SELECT public.app_cents(1); COMMIT"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := connect(t, f.dsn("agent-udf", passRO, "udf"))
			for _, s := range tt.steps {
				_, _ = c.Exec(ctxT(t), s).ReadAll()
			}
			_, err := c.Exec(ctxT(t), "SELECT public.app_cents(1)").ReadAll()
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || (pe.Code != "25006" && pe.Code != "25P02") {
				t.Errorf("write after %q = %v; want PostgreSQL's read-only refusal 25006 (or an aborted transaction)", tt.steps, err)
			}
			_, _ = c.Exec(ctxT(t), "ROLLBACK").ReadAll()
			if got := rows(t, c, "SHOW default_transaction_read_only"); len(got) != 1 || got[0][0] != "on" {
				t.Errorf("after %q default_transaction_read_only = %v; want on", tt.steps, got)
			}
			if got := rows(t, super, "SELECT count(*) FROM calls"); got[0][0] != "0" {
				rows(t, super, "TRUNCATE calls")
				t.Errorf("after %q public.calls has %s rows; want 0 (the read-only session wrote)", tt.steps, got[0][0])
			}
		})
	}
}

// TestReadOnlyPinFollowsTheProfile: a profile that may write starts its
// sessions read-write, so the pin is the profile's, not every session's.
func TestReadOnlyPinFollowsTheProfile(t *testing.T) {
	pg := sharedPG(t)
	f := startGate(t, pg, nil)
	for _, tt := range []struct{ user, pass, want string }{{"agent-ro", passRO, "on"}, {"agent-rw", passRW, "off"}} {
		c := connect(t, f.dsn(tt.user, tt.pass, "app"))
		if got := rows(t, c, "SHOW default_transaction_read_only"); len(got) != 1 || got[0][0] != tt.want {
			t.Errorf("%s: default_transaction_read_only = %v; want %s", tt.user, got, tt.want)
		}
	}
}

// TestUserFunctionsBehindTypesViewsAndPolicies is item 8 of issue 21: a
// user function reached with no call in the text — a domain CHECK inside a
// composite type, a view's query, a row-level security policy — is in
// the facts, so a profile that allows no user function is refused
// function_not_allowed, and the witness (bump's and bump_check's rows in
// public.bumps) shows it never ran. (The gate logs in upstream as a
// superuser, which row-level security does not apply to, so guarded's
// policy is witnessed by the refusal alone.)
func TestUserFunctionsBehindTypesViewsAndPolicies(t *testing.T) {
	sharedPG(t)
	if err := udfDB(); err != nil {
		t.Fatalf("udf database: %v", err)
	}
	f := startGate(t, shared, nil)
	super := connect(t, f.srv.DSN("udf"))
	c := connect(t, f.dsn("agent-rw", passRW, "udf"))
	for _, q := range []string{
		"SELECT '5'::positive",
		"SELECT '(5)'::boxed",
		"SELECT ROW(5)::boxed",
		`SELECT jsonb_populate_record(NULL::boxed, '{"x": 5}')`,
		`SELECT jsonb_populate_record(NULL::nest, '{"b": {"x": 5}}')`,
		`SELECT * FROM jsonb_to_record('{"x": 5}') AS r(x positive)`,
		"SELECT CAST('{1}' AS positive[])",
		"SELECT n FROM v_bump",
		"SELECT n FROM v_outer",
		"SELECT a FROM guarded",
		"DELETE FROM guarded WHERE a = 0",
	} {
		wantQueryDenied(t, c, q, "function_not_allowed")
	}
	rows(t, c, "SELECT 1 FROM nest WHERE b IS NULL")
	if got := rows(t, super, "SELECT count(*) FROM bumps"); got[0][0] != "0" {
		t.Errorf("public.bumps has %s rows; want 0 (a user function ran behind a type, view or policy)", got[0][0])
	}
}

// A read-only session whose upstream reports default_transaction_read_only
// changed (here by an allowed user function calling set_config, which no
// fact sees) is ended: PostgreSQL's own report is the backstop of the pin.
func TestReadOnlyPinChangedUpstreamEndsSession(t *testing.T) {
	f := startUDFGate(t, nil)
	super := connect(t, f.srv.DSN("udf"))
	c := connect(t, f.dsn("agent-udf", passRO, "udf"))
	_, err := c.Exec(ctxT(t), "SELECT public.app_fmt('x')").ReadAll()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Severity != "FATAL" {
		t.Fatalf("SELECT app_fmt('x') = %v; want the session ended FATAL", err)
	}
	if _, err := c.Exec(ctxT(t), "SELECT public.app_cents(1)").ReadAll(); err == nil {
		t.Error("the session went on after its upstream turned read-only off")
	}
	if got := rows(t, super, "SELECT count(*) FROM calls"); got[0][0] != "0" {
		t.Errorf("public.calls has %s rows; want 0", got[0][0])
	}
}
