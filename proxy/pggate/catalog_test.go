package pggate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/policy"
	"github.com/jackc/pgx/v5/pgconn"
)

// catalogDBs numbers the databases the catalog tests create, so that each
// test's user functions stay its own in the shared cluster.
var catalogDBs atomic.Int32

// catalogDB creates a database holding a witness table, purged, and runs
// setup in it as the superuser.
func catalogDB(t *testing.T, setup string) string {
	t.Helper()
	pg := sharedPG(t)
	db := fmt.Sprintf("catalog%d", catalogDBs.Add(1))
	ctx := ctxT(t)
	if err := pg.Exec(ctx, "postgres", "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, db, `CREATE TABLE purged (fn text);`+setup); err != nil {
		t.Fatal(err)
	}
	return db
}

// wantNothingPurged wants the purged table of db empty: fn, which writes
// to it, never ran through the gate.
func wantNothingPurged(t *testing.T, db, fn string) {
	t.Helper()
	if n := rows(t, connect(t, sharedPG(t).DSN(db)), "SELECT count(*) FROM purged")[0][0]; n != "0" {
		t.Errorf("%s ran %s times through the gate; want 0", fn, n)
	}
}

// createShadowUpper adds public.upper(int), an overload of the built-in
// that writes to purged, to db behind the gate's back.
func createShadowUpper(t *testing.T, db string) {
	t.Helper()
	if err := sharedPG(t).Exec(ctxT(t), db, `
		CREATE FUNCTION public.upper(int) RETURNS text LANGUAGE sql AS $$ INSERT INTO purged VALUES ('upper') RETURNING 'x' $$;`); err != nil {
		t.Fatal(err)
	}
}

// Finding (issue 12): a user-defined operator ran app_purge although
// `SELECT app_purge(1,2)` was denied.
func TestUserOperatorNeedsItsFunctionAllowed(t *testing.T) {
	db := catalogDB(t, `
		CREATE FUNCTION app_purge(int, int) RETURNS int LANGUAGE sql AS $$ INSERT INTO purged VALUES ('app_purge') RETURNING 1 $$;
		CREATE OPERATOR #!# (LEFTARG = int, RIGHTARG = int, PROCEDURE = app_purge);`)
	f := startGate(t, sharedPG(t), nil)
	c := connect(t, f.dsn("agent-ro", passRO, db))
	for _, sql := range []string{
		"SELECT app_purge(1, 2)",
		"SELECT 1 #!# 2",
		"SELECT 1 WHERE 2 = (1 #!# 2)",
		"EXPLAIN ANALYZE SELECT 1 #!# 2",
	} {
		wantQueryDenied(t, c, sql, "function_not_allowed")
	}
	wantNothingPurged(t, db, "app_purge")
	if got := rows(t, c, "SELECT 1 + 2"); got[0][0] != "3" {
		t.Errorf("SELECT 1 + 2 = %v; want 3 (built-in operators stay allowed)", got)
	}
}

// Finding (issue 12): `lower(42)` resolved to a user-created
// public.lower(int) overload, as the allow-list assumed a listed name
// means the built-in.
func TestOverloadOfBuiltinNeedsAllow(t *testing.T) {
	db := catalogDB(t, `
		CREATE FUNCTION public.lower(int) RETURNS text LANGUAGE sql AS $$ INSERT INTO purged VALUES ('lower') RETURNING 'x' $$;`)
	f := startGate(t, sharedPG(t), nil)
	c := connect(t, f.dsn("agent-ro", passRO, db))
	wantQueryDenied(t, c, "SELECT lower(42)", "function_not_allowed")
	wantNothingPurged(t, db, "public.lower(int)")
	// In a database without the overload, lower is the built-in.
	c2 := connect(t, f.dsn("agent-ro", passRO, "app"))
	if got := rows(t, c2, "SELECT lower('A')"); got[0][0] != "a" {
		t.Errorf("SELECT lower('A') in app = %v; want a", got)
	}
}

// A cast to a domain runs the functions of its CHECK constraints (found by
// TestOracle): they need an allow like any other user function.
func TestDomainCheckNeedsItsFunctionAllowed(t *testing.T) {
	db := catalogDB(t, `
		CREATE FUNCTION app_check(text) RETURNS bool LANGUAGE plpgsql AS $$ BEGIN INSERT INTO purged VALUES ('app_check'); RETURN true; END $$;
		CREATE DOMAIN checked AS text CHECK (app_check(VALUE));
		CREATE DOMAIN checked_twice AS checked CHECK (length(VALUE) < 10);`)
	f := startGate(t, sharedPG(t), nil)
	c := connect(t, f.dsn("agent-ro", passRO, db))
	for _, sql := range []string{"SELECT 'a'::checked", "SELECT CAST('a' AS checked_twice)"} {
		wantQueryDenied(t, c, sql, "function_not_allowed")
	}
	wantNothingPurged(t, db, "app_check")
}

// Extensions that define common operators (citext defines =) make every
// statement applying them reach the extension's functions, which need an
// allow; trusted_extensions counts an extension's members as built-ins.
func TestTrustedExtensionCountsAsBuiltin(t *testing.T) {
	db := catalogDB(t, `
		CREATE EXTENSION citext;
		CREATE FUNCTION app_purge(int, int) RETURNS int LANGUAGE sql AS $$ INSERT INTO purged VALUES ('app_purge') RETURNING 1 $$;
		CREATE OPERATOR #!# (LEFTARG = int, RIGHTARG = int, PROCEDURE = app_purge);`)
	strict := startGate(t, sharedPG(t), nil)
	c := connect(t, strict.dsn("agent-ro", passRO, db))
	wantQueryDenied(t, c, "SELECT 1 WHERE 1 = 1", "function_not_allowed")
	trusting := startGate(t, sharedPG(t), func(c *Config) { c.TrustedExtensions = []string{"citext", `odd"name\`} })
	c2 := connect(t, trusting.dsn("agent-ro", passRO, db))
	if got := rows(t, c2, "SELECT 1 WHERE 1 = 1"); len(got) != 1 || got[0][0] != "1" {
		t.Errorf("SELECT 1 WHERE 1 = 1 with citext trusted = %v; want [[1]]", got)
	}
	// Trusting an extension trusts nothing else.
	wantQueryDenied(t, c2, "SELECT 1 #!# 2", "function_not_allowed")
	wantNothingPurged(t, db, "app_purge")
}

// A function created after the gate read the catalog is seen after a
// reload: by the session open before it and by the next login.
func TestCatalogReadAgainAfterReload(t *testing.T) {
	db := catalogDB(t, "")
	f := startGate(t, sharedPG(t), func(c *Config) { c.CatalogTTL = time.Hour })
	c := connect(t, f.dsn("agent-ro", passRO, db))
	if got := rows(t, c, "SELECT upper('a')"); got[0][0] != "A" {
		t.Fatalf("SELECT upper('a') = %v; want A", got)
	}
	createShadowUpper(t, db)
	f.gate.Reload(testEngine(t), testIdentities(t))
	f.gate.refreshing.Wait()
	// The session that began before the reload decides with the refreshed
	// snapshot of its database.
	wantQueryDenied(t, c, "SELECT upper(43)", "function_not_allowed")
	c2 := connect(t, f.dsn("agent-ro", passRO, db))
	wantQueryDenied(t, c2, "SELECT upper(42)", "function_not_allowed")
	wantNothingPurged(t, db, "public.upper(int)")
}

// An open session's catalog older than catalog_ttl is read again, so a
// long session sees a function created after it began.
func TestCatalogTTLRefreshesOpenSession(t *testing.T) {
	db := catalogDB(t, "")
	f := startGate(t, sharedPG(t), func(c *Config) { c.CatalogTTL = time.Nanosecond })
	c := connect(t, f.dsn("agent-ro", passRO, db))
	createShadowUpper(t, db)
	// This statement finds the snapshot expired and starts the read.
	if got := rows(t, c, "SELECT 1"); got[0][0] != "1" {
		t.Fatalf("SELECT 1 = %v; want 1", got)
	}
	f.gate.refreshing.Wait()
	wantQueryDenied(t, c, "SELECT upper(42)", "function_not_allowed")
	wantNothingPurged(t, db, "public.upper(int)")
}

// A catalog the gate cannot read refuses the login: without it a call
// could reach a user function unseen.
func TestCatalogUnreadableRefusesLogin(t *testing.T) {
	db := catalogDB(t, `
		CREATE ROLE gate_limited LOGIN PASSWORD 'gate-limited-pw';
		REVOKE SELECT ON pg_catalog.pg_cast FROM PUBLIC;`)
	t.Cleanup(func() {
		pg := sharedPG(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Clean-up of a shared server: a leftover is harmless.
		_ = pg.Exec(ctx, "postgres", "DROP DATABASE "+db)
		_ = pg.Exec(ctx, "postgres", "DROP ROLE gate_limited")
	})
	t.Setenv("PGGATE_LIMITED_PASSWORD", "gate-limited-pw")
	f := startGate(t, sharedPG(t), func(c *Config) {
		c.Upstream = strings.Replace(c.Upstream, "postgres://postgres@", "postgres://gate_limited@", 1)
		c.PasswordEnv = "PGGATE_LIMITED_PASSWORD"
	})
	ctx := ctxT(t)
	c, err := pgconn.Connect(ctx, f.dsn("agent-ro", passRO, db))
	if err == nil {
		c.Close(ctx)
		t.Fatal("Connect succeeded; want catalog_unavailable")
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || !strings.Contains(pe.Message, "egressd: denied: catalog_unavailable") {
		t.Fatalf("Connect error = %v; want egressd: denied: catalog_unavailable", err)
	}
	var audited bool
	for _, r := range f.audit.Records() {
		audited = audited || r.Reason == string(policy.ReasonCatalogUnavailable) && r.Database == db
	}
	if !audited {
		t.Errorf("audit records = %+v; want a catalog_unavailable deny for %s", f.audit.Records(), db)
	}
}

// BenchmarkLoadCatalog is the cost a login pays when its database's
// catalog is stale: one query and the index.
func BenchmarkLoadCatalog(b *testing.B) {
	pg := sharedPG(b)
	ctx := context.Background()
	conn, err := pgconn.Connect(ctx, pg.DSN("app"))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := LoadCatalog(ctx, conn, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// createShadowLower adds public.lower(int), an overload of the built-in
// that writes to purged, to db behind the gate's back.
func createShadowLower(t *testing.T, db string) {
	t.Helper()
	if err := sharedPG(t).Exec(ctxT(t), db, `
		CREATE FUNCTION public.lower(int) RETURNS text LANGUAGE sql AS $$ INSERT INTO purged VALUES ('lower') RETURNING 'x' $$;`); err != nil {
		t.Fatal(err)
	}
}

// dbCatalogOf is the gate's catalog holder of db.
func dbCatalogOf(t *testing.T, g *Gate, db string) *dbCatalog {
	t.Helper()
	g.catalogs.mu.Lock()
	defer g.catalogs.mu.Unlock()
	e := g.catalogs.m[db]
	if e == nil {
		t.Fatalf("the gate holds no catalog of %s", db)
	}
	return e
}

// Item 9 of issue 21, without the change trigger: a function created
// after login was unseen for catalog_ttl, so a read_only `SELECT
// lower(42)` ran a new public.lower(int). A decision whose snapshot is
// older than catalogMaxAge now reads the catalog first. (The snapshot is
// made older by moving its read time back, not by waiting.)
func TestCatalogChangeSeenWithoutTrigger(t *testing.T) {
	db := catalogDB(t, "")
	f := startGate(t, sharedPG(t), func(c *Config) { c.CatalogTTL = time.Hour })
	c := connect(t, f.dsn("agent-ro", passRO, db))
	if got := rows(t, c, "SELECT lower('A')"); got[0][0] != "a" {
		t.Fatalf("SELECT lower('A') = %v; want a", got)
	}
	createShadowLower(t, db)
	e := dbCatalogOf(t, f.gate, db)
	// A snapshot younger than the bound is used as it is.
	if got := rows(t, c, "SELECT lower('B')"); got[0][0] != "b" {
		t.Fatalf("SELECT lower('B') = %v; want b", got)
	}
	e.readAt.Store(time.Now().Add(-catalogMaxAge).UnixNano())
	wantQueryDenied(t, c, "SELECT lower(42)", "function_not_allowed")
	wantNothingPurged(t, db, "public.lower(int)")
}

// A catalog that cannot be read again when it is due denies the
// statement catalog_unavailable (audited) rather than deciding with the
// old one.
func TestCatalogRereadFailureDenies(t *testing.T) {
	db := catalogDB(t, "")
	f := startGate(t, sharedPG(t), func(c *Config) { c.CatalogTTL = time.Hour })
	c := connect(t, f.dsn("agent-ro", passRO, db))
	rows(t, c, "SELECT 1")
	// The gate's logins to db now fail; the open session is unaffected.
	if err := sharedPG(t).Exec(ctxT(t), "postgres", "ALTER DATABASE "+db+" WITH ALLOW_CONNECTIONS false"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sharedPG(t).Exec(context.Background(), "postgres", "ALTER DATABASE "+db+" WITH ALLOW_CONNECTIONS true")
	})
	dbCatalogOf(t, f.gate, db).readAt.Store(time.Now().Add(-catalogMaxAge).UnixNano())
	wantQueryDenied(t, c, "SELECT 1", string(policy.ReasonCatalogUnavailable))
	var audited bool
	for _, r := range f.audit.Records() {
		audited = audited || r.Reason == string(policy.ReasonCatalogUnavailable) && r.Database == db
	}
	if !audited {
		t.Errorf("audit records = %+v; want a catalog_unavailable deny for %s", f.audit.Records(), db)
	}
}

// Item 9 of issue 21, with the change trigger of deploy/catalog-notify.sql:
// the gate LISTENs on the database and reads the catalog again when the
// DBA's CREATE FUNCTION commits, so the next `SELECT lower(42)` is denied
// with no re-read on the decision path (the max age is set out of reach).
func TestCatalogChangeTriggerNotifiesGate(t *testing.T) {
	install, err := os.ReadFile("../../deploy/catalog-notify.sql")
	if err != nil {
		t.Fatal(err)
	}
	db := catalogDB(t, string(install))
	f := startGate(t, sharedPG(t), func(c *Config) { c.CatalogTTL = time.Hour })
	f.gate.catalogs.maxAgeOverride.Store(int64(time.Hour))
	stored := make(chan struct{}, 16)
	hook := func(d string) {
		if d == db {
			stored <- struct{}{}
		}
	}
	f.gate.catalogs.onStore.Store(&hook)
	waitStored := func(what string) {
		t.Helper()
		select {
		case <-stored:
		case <-ctxT(t).Done():
			t.Fatalf("no catalog of %s stored %s", db, what)
		}
	}
	c := connect(t, f.dsn("agent-ro", passRO, db))
	waitStored("at login")
	// The first decision starts the listener, which reads the catalog
	// after its LISTEN.
	rows(t, c, "SELECT 1")
	waitStored("by the listener")
	createShadowLower(t, db)
	waitStored("after the notification")
	wantQueryDenied(t, c, "SELECT lower(42)", "function_not_allowed")
	wantNothingPurged(t, db, "public.lower(int)")
}

// BenchmarkCatalogReread is what the decision that finds its snapshot
// older than catalogMaxAge pays on a database without the change trigger
// (a login with the gate's credentials and the catalog read), at most once
// per catalogMaxAge per database while statements arrive.
func BenchmarkCatalogReread(b *testing.B) {
	pg := sharedPG(b)
	f := startGate(b, pg, nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.gate.loadCatalog(ctx, "app"); err != nil {
			b.Fatal(err)
		}
	}
}
