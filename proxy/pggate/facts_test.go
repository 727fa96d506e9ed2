package pggate

import (
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// The tests of this file send the review's statements (issue 12) through
// the gate to a real PostgreSQL and check the database afterwards: the
// witness of a write the facts missed is a changed row.

// factsFixture creates the tables these tests write to, each with three
// rows, in the shared server's app database.
func factsFixture(t *testing.T) (direct *pgconn.PgConn, f *fixture) {
	t.Helper()
	pg := sharedPG(t)
	direct = connect(t, pg.DSN("app"))
	if _, err := direct.Exec(ctxT(t), `
		DROP TABLE IF EXISTS gf_t, gf_orders, gf_x;
		DROP SEQUENCE IF EXISTS gf_seq, private.gf_seq;
		CREATE TABLE gf_t (id int PRIMARY KEY, note text);
		CREATE TABLE gf_orders (id int PRIMARY KEY, total int NOT NULL);
		CREATE TABLE gf_x (id int PRIMARY KEY);
		INSERT INTO gf_t SELECT g, 'n' FROM generate_series(1, 3) g;
		INSERT INTO gf_orders SELECT g, 10 * g FROM generate_series(1, 3) g;
		INSERT INTO gf_x SELECT g FROM generate_series(1, 3) g;
		CREATE SEQUENCE gf_seq;
		CREATE SEQUENCE private.gf_seq;`).ReadAll(); err != nil {
		t.Fatal(err)
	}
	return direct, startGate(t, pg, nil)
}

// tableState is what a write would change: the rows of the fixture tables
// and the sequences' last values.
func tableState(t *testing.T, direct *pgconn.PgConn) [][]string {
	return rows(t, direct, `SELECT (SELECT string_agg(id || ':' || note, ',' ORDER BY id) FROM gf_t),
		(SELECT string_agg(id || ':' || total, ',' ORDER BY id) FROM gf_orders),
		(SELECT string_agg(id::text, ',' ORDER BY id) FROM gf_x),
		(SELECT last_value || ':' || is_called FROM gf_seq),
		(SELECT last_value || ':' || is_called FROM private.gf_seq)`)
}

func TestWritesHiddenInCopyAndCTEsDenied(t *testing.T) {
	direct, f := factsFixture(t)
	tests := []deniedCase{
		{"ro copy delete through a shadowing cte", "agent-ro", "COPY (WITH gf_t AS (SELECT 1) DELETE FROM gf_t RETURNING *) TO STDOUT", "write_denied"},
		{"ro copy update", "agent-ro", "COPY (WITH gf_orders AS (SELECT 1) UPDATE gf_orders SET total = 0 WHERE true RETURNING *) TO STDOUT", "write_denied"},
		{"ro copy insert", "agent-ro", "COPY (WITH gf_t AS (SELECT 1) INSERT INTO gf_t VALUES (9, 'x') RETURNING *) TO STDOUT", "write_denied"},
		{"ro copy plain delete", "agent-ro", "COPY (DELETE FROM gf_x WHERE id = 1 RETURNING id) TO STDOUT", "write_denied"},
		{"rw shadowed write list", "agent-rw", "WITH secrets AS (SELECT 1) INSERT INTO private.secrets VALUES ('x')", "write_denied"},
		{"rw copy delete without where", "agent-rw", "COPY (DELETE FROM gf_x RETURNING id) TO STDOUT", "missing_where"},
		{"rw writable cte without where", "agent-rw", "WITH d AS (DELETE FROM gf_x RETURNING *) SELECT count(*) FROM d", "missing_where"},
		{"rw merge on true", "agent-rw", "MERGE INTO gf_orders o USING (SELECT 1) s ON true WHEN MATCHED THEN UPDATE SET total = 0", "missing_where"},
		{"rw merge delete", "agent-rw", "MERGE INTO gf_orders o USING gf_x s ON o.id = s.id WHEN MATCHED THEN DELETE", "missing_where"},
		{"rw upsert of a query", "agent-rw", "INSERT INTO gf_orders SELECT * FROM gf_orders ON CONFLICT (id) DO UPDATE SET total = 0", "missing_where"},
	}
	conns := wantAllDenied(t, f, direct, tests)
	// The same forms with a WHERE (MERGE: an AND condition) run.
	rw := conns["agent-rw"]
	for _, q := range []string{
		"COPY (DELETE FROM gf_x WHERE id = 3 RETURNING id) TO STDOUT",
		"WITH d AS (DELETE FROM gf_x WHERE id = 2 RETURNING *) SELECT count(*) FROM d",
		"INSERT INTO gf_orders VALUES (2, 20) ON CONFLICT (id) DO UPDATE SET total = excluded.total",
		"MERGE INTO gf_orders o USING gf_x s ON o.id = s.id WHEN MATCHED AND s.id = 1 THEN UPDATE SET total = 0",
	} {
		if _, err := rw.Exec(ctxT(t), q).ReadAll(); err != nil {
			t.Errorf("%s: %v; want allowed", q, err)
		}
	}
	if got := rows(t, direct, "SELECT (SELECT count(*) FROM gf_x), (SELECT total FROM gf_orders WHERE id = 1)"); got[0][0] != "1" || got[0][1] != "0" {
		t.Errorf("gf_x rows, order 1 total after filtered writes = %v; want 1, 0", got[0])
	}
}

// deniedCase is a statement a user's session must see denied with reason.
type deniedCase struct{ name, user, sql, reason string }

// wantAllDenied runs each case on its user's session (agent-ro or
// agent-rw), wants it denied with its reason, and wants the fixture's
// tables unchanged afterwards. It returns the sessions, for the allowed
// forms the caller tries next.
func wantAllDenied(t *testing.T, f *fixture, direct *pgconn.PgConn, tests []deniedCase) map[string]*pgconn.PgConn {
	t.Helper()
	before := tableState(t, direct)
	conns := map[string]*pgconn.PgConn{
		"agent-ro": connect(t, f.dsn("agent-ro", passRO, "app")),
		"agent-rw": connect(t, f.dsn("agent-rw", passRW, "app")),
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantQueryDenied(t, conns[tt.user], tt.sql, tt.reason)
		})
	}
	if after := tableState(t, direct); !reflect.DeepEqual(before, after) {
		t.Errorf("tables after the denied statements = %v; want unchanged %v", after, before)
	}
	return conns
}

func TestNamesInValuesAreChecked(t *testing.T) {
	direct, f := factsFixture(t)
	tests := []deniedCase{
		{"row type of pg_authid", "agent-ro", "SELECT jsonb_populate_record(NULL::pg_authid, '{}')", "table_not_allowed"},
		{"row type of another schema", "agent-ro", "SELECT NULL::private.secrets", "table_not_allowed"},
		{"row constructor", "agent-ro", "SELECT ROW('x')::private.secrets", "table_not_allowed"},
		{"regclass cast", "agent-ro", "SELECT 'private.secrets'::regclass", "table_not_allowed"},
		{"regclass of a parameter", "agent-ro", "SELECT $1::regclass", "dynamic_name_denied"},
		{"nextval outside the write list", "agent-rw", "SELECT nextval('private.gf_seq')", "write_denied"},
		{"setval outside the write list", "agent-rw", "SELECT setval('private.gf_seq', 100)", "write_denied"},
		{"nextval of a column", "agent-rw", "SELECT nextval(note) FROM gf_t", "dynamic_name_denied"},
		{"show all", "agent-ro", "SHOW ALL", "table_not_allowed"},
		{"statement_timeout 0", "agent-ro", "SET statement_timeout = 0", "setting_value_denied"},
		{"statement_timeout negative", "agent-ro", "SET statement_timeout = -1", "setting_value_denied"},
		{"statement_timeout above the bound", "agent-ro", "SET statement_timeout = '2h'", "setting_value_denied"},
		{"lock_timeout unparseable", "agent-ro", "SET lock_timeout = '0x10'", "setting_value_denied"},
		{"work_mem above the bound", "agent-ro", "SET work_mem = '100GB'", "setting_value_denied"},
	}
	conns := wantAllDenied(t, f, direct, tests)
	for _, q := range []string{
		"SHOW work_mem",
		"SET statement_timeout = '5s'",
		"SET LOCAL lock_timeout = 1000",
		"SET work_mem = '64MB'",
		"RESET statement_timeout",
		"SELECT 'gf_t'::regclass",
	} {
		if _, err := conns["agent-ro"].Exec(ctxT(t), q).ReadAll(); err != nil {
			t.Errorf("%s: %v; want allowed", q, err)
		}
	}
	if got := rows(t, conns["agent-rw"], "SELECT nextval('gf_seq')"); got[0][0] != "1" {
		t.Errorf("nextval('gf_seq') = %v; want 1", got)
	}
}

// TestConstantFactsNotSharedByCaches sends the allowed text first and a
// denied one that differs only in a constant second: the verdict caches
// keyed by shape or normalized text must not hand the second the first's
// verdict.
func TestConstantFactsNotSharedByCaches(t *testing.T) {
	_, f := factsFixture(t)
	tests := []struct {
		name, user, allowed, denied, reason string
	}{
		{"sequence name", "agent-rw", "SELECT nextval('gf_seq')", "SELECT nextval('private.gf_seq')", "write_denied"},
		{"setting string", "agent-ro", "SET statement_timeout = '5s'", "SET statement_timeout = 0", "setting_value_denied"},
		{"setting integer shape", "agent-ro", "SET statement_timeout = 5000", "SET statement_timeout = 0", "setting_value_denied"},
		{"regclass string", "agent-ro", "SELECT 'users'::regclass", "SELECT 'private.secrets'::regclass", "table_not_allowed"},
		{"regclass null", "agent-ro", "SELECT NULL::regclass", "SELECT 'private.secrets'::regclass", "table_not_allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pass := passRO
			if tt.user == "agent-rw" {
				pass = passRW
			}
			c := connect(t, f.dsn(tt.user, pass, "app"))
			if _, err := c.Exec(ctxT(t), tt.allowed).ReadAll(); err != nil {
				t.Fatalf("%s: %v; want allowed", tt.allowed, err)
			}
			wantQueryDenied(t, c, tt.denied, tt.reason)
		})
	}
}
