package pggate

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/egressd/egressd/policy/sqlfacts"
)

// catalogQuery lists what a database defines beyond the built-ins, one row
// per item: kind, schema, name, function schema, function name, implicit.
// 'b' rows are pg_catalog's function names; 'f' every function elsewhere;
// 'o' every operator outside pg_catalog or calling a function outside it;
// 'c' every cast calling a function outside pg_catalog, and every function
// outside pg_catalog that making a value of a type runs through a domain
// CHECK: the domain's own and its base domains', and those of the domains
// inside a composite type (a table's row type too) or an array, at any
// depth ('(5)'::t and jsonb_populate_record(NULL::t, …) check t's columns);
// 'r' every function outside pg_catalog that reading or writing a relation
// runs: called by a view's query or a row-level security policy, or by a
// domain CHECK of a type they use, or by a relation they read, at any
// depth. information_schema is the server's own and counts as built-in, and
// so do the members of the extensions named in $1 (trusted_extensions).
//
// These are resolved rather than refused: refusing every composite cast,
// view and RLS-protected table to the profiles that allow no user function
// would refuse most of what an analyst reads, while resolving from
// PostgreSQL's own dependency records names exactly the functions that can
// run, which the profile then allows or not like any other call.
//
// The 'c' and 'r' closures are walked backwards, from the constraints,
// rules and policies that call a user function to the types and relations
// that reach them, so a schema with no such function costs nothing. The
// dependencies are PostgreSQL's own (pg_depend records every function a
// CHECK, a view's rule or a policy calls), not a reading of their text.
// Table CHECK constraints, column defaults and triggers are not followed:
// they run on a write, which the profile's write list decides on.
const catalogQuery = `
WITH RECURSIVE trusted AS (
  SELECT d.classid, d.objid FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_extension x ON x.oid = d.refobjid
   WHERE d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass AND d.deptype = 'e' AND x.extname = ANY ($1::pg_catalog.text[])),
trusted_proc AS (SELECT objid AS oid FROM trusted WHERE classid = 'pg_catalog.pg_proc'::pg_catalog.regclass),
user_proc AS (
  SELECT p.oid, n.nspname, p.proname FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
   WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND p.oid NOT IN (SELECT oid FROM trusted_proc)),
type_edge(typ, ref) AS (
  SELECT oid, typbasetype FROM pg_catalog.pg_type WHERE typtype = 'd'
  UNION ALL
  SELECT t.oid, a.atttypid FROM pg_catalog.pg_type t
    JOIN pg_catalog.pg_attribute a ON a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped
   WHERE t.typtype = 'c'
  UNION ALL
  SELECT oid, typelem FROM pg_catalog.pg_type WHERE typcategory = 'A' AND typelem <> 0),
type_func(typ, fn) AS (
  SELECT c.contypid, f.oid FROM pg_catalog.pg_constraint c
    JOIN pg_catalog.pg_depend dep ON dep.classid = 'pg_catalog.pg_constraint'::pg_catalog.regclass AND dep.objid = c.oid
     AND dep.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
    JOIN user_proc f ON f.oid = dep.refobjid
   WHERE c.contypid <> 0
  UNION
  SELECT e.typ, tf.fn FROM type_func tf JOIN type_edge e ON e.ref = tf.typ),
rel_dep(rel, refclassid, refobjid) AS (
  SELECT r.ev_class, dep.refclassid, dep.refobjid FROM pg_catalog.pg_rewrite r
    JOIN pg_catalog.pg_depend dep ON dep.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass AND dep.objid = r.oid
  UNION ALL
  SELECT p.polrelid, dep.refclassid, dep.refobjid FROM pg_catalog.pg_policy p
    JOIN pg_catalog.pg_depend dep ON dep.classid = 'pg_catalog.pg_policy'::pg_catalog.regclass AND dep.objid = p.oid),
rel_func(rel, fn) AS (
  SELECT d.rel, f.oid FROM rel_dep d JOIN user_proc f ON f.oid = d.refobjid
   WHERE d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
  UNION
  SELECT d.rel, tf.fn FROM rel_dep d JOIN type_func tf ON tf.typ = d.refobjid
   WHERE d.refclassid = 'pg_catalog.pg_type'::pg_catalog.regclass
  UNION
  SELECT d.rel, rf.fn FROM rel_func rf JOIN rel_dep d ON d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
     AND d.refobjid = rf.rel AND d.rel <> rf.rel)
SELECT 'b', '', p.proname, '', '', false
  FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'pg_catalog'::pg_catalog.regnamespace GROUP BY p.proname
UNION ALL
SELECT 'f', nspname, proname, '', '', false FROM user_proc
UNION ALL
SELECT 'o', n.nspname, o.oprname, fn.nspname, f.proname, false
  FROM pg_catalog.pg_operator o
  JOIN pg_catalog.pg_namespace n ON n.oid = o.oprnamespace
  JOIN pg_catalog.pg_proc f ON f.oid = o.oprcode
  JOIN pg_catalog.pg_namespace fn ON fn.oid = f.pronamespace
 WHERE (n.nspname NOT IN ('pg_catalog', 'information_schema') OR fn.nspname NOT IN ('pg_catalog', 'information_schema'))
   AND o.oid NOT IN (SELECT objid FROM trusted WHERE classid = 'pg_catalog.pg_operator'::pg_catalog.regclass)
   AND f.oid NOT IN (SELECT oid FROM trusted_proc)
UNION ALL
SELECT 'c', '', t.typname, f.nspname, f.proname, c.castcontext <> 'e'
  FROM pg_catalog.pg_cast c
  JOIN pg_catalog.pg_type t ON t.oid = c.casttarget
  JOIN user_proc f ON f.oid = c.castfunc
UNION ALL
SELECT DISTINCT 'c', '', t.typname, f.nspname, f.proname, false
  FROM type_func tf JOIN pg_catalog.pg_type t ON t.oid = tf.typ JOIN user_proc f ON f.oid = tf.fn
UNION ALL
SELECT DISTINCT 'r', n.nspname, c.relname, f.nspname, f.proname, false
  FROM rel_func rf
  JOIN pg_catalog.pg_class c ON c.oid = rf.rel
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  JOIN user_proc f ON f.oid = rf.fn`

// LoadCatalog reads the catalog of the database conn is connected to; the
// members of the extensions named in trusted count as built-ins.
func LoadCatalog(ctx context.Context, conn *pgconn.PgConn, trusted []string) (*sqlfacts.Catalog, error) {
	res := conn.ExecParams(ctx, catalogQuery, [][]byte{textArray(trusted)}, nil, nil, nil).Read()
	if res.Err != nil {
		return nil, fmt.Errorf("read catalog: %w", res.Err)
	}
	var builtins []string
	var funcs []sqlfacts.Function
	var ops []sqlfacts.CatalogOperator
	var casts []sqlfacts.CatalogCast
	var rels []sqlfacts.CatalogRelation
	for _, r := range res.Rows {
		if len(r) != 6 {
			return nil, fmt.Errorf("read catalog: row of %d columns, want 6", len(r))
		}
		schema, name := string(r[1]), string(r[2])
		fn := sqlfacts.Function{Schema: string(r[3]), Name: string(r[4])}
		switch string(r[0]) {
		case "b":
			builtins = append(builtins, name)
		case "f":
			funcs = append(funcs, sqlfacts.Function{Schema: schema, Name: name})
		case "o":
			ops = append(ops, sqlfacts.CatalogOperator{Schema: schema, Name: name, Func: fn})
		case "c":
			casts = append(casts, sqlfacts.CatalogCast{Target: name, Func: fn, Implicit: string(r[5]) == "t"})
		case "r":
			rels = append(rels, sqlfacts.CatalogRelation{Schema: schema, Name: name, Func: fn})
		default:
			return nil, fmt.Errorf("read catalog: unknown row kind %q", r[0])
		}
	}
	if len(builtins) == 0 {
		// Every server has pg_catalog functions: none means the query
		// did not see the catalog, and "nothing user-defined" would be
		// a guess.
		return nil, fmt.Errorf("read catalog: no pg_catalog functions visible")
	}
	return sqlfacts.NewCatalog(builtins, funcs, ops, casts, rels), nil
}

// textArray is names as a PostgreSQL text[] literal.
func textArray(names []string) []byte {
	b := []byte{'{'}
	for i, n := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		for j := 0; j < len(n); j++ {
			if n[j] == '"' || n[j] == '\\' {
				b = append(b, '\\')
			}
			b = append(b, n[j])
		}
		b = append(b, '"')
	}
	return append(b, '}')
}

// UpstreamCatalog logs in to database db of the upstream cfg names, with
// the gate's credentials, and reads its catalog: what `egressd check sql`
// resolves calls against, as the gate would. cfg must have been
// validated.
func UpstreamCatalog(ctx context.Context, cfg Config, db string) (*sqlfacts.Catalog, error) {
	pc, err := pgconn.ParseConfig(cfg.Upstream)
	if err != nil {
		return nil, fmt.Errorf("postgres.upstream: %w", err)
	}
	if pc.Password, err = upstreamPassword(cfg); err != nil {
		return nil, err
	}
	pc.Database = db
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect upstream database %q: %w", db, err)
	}
	defer conn.Close(ctx)
	return LoadCatalog(ctx, conn, cfg.TrustedExtensions)
}

// catalogs caches each database's catalog. A snapshot is read again at the
// start of a session to its database when it is older than the TTL or
// older than the last reload; in the background after every reload, and
// when an open session finds it older than the TTL; and before a decision
// that finds it older than catalogMaxAge, or on a change notification
// (catalogfresh.go). A session decides with the newest snapshot of its
// database.
type catalogs struct {
	ttl time.Duration

	mu sync.Mutex
	// reloads counts Update calls: a snapshot taken before the latest is
	// stale.
	reloads uint64
	m       map[string]*dbCatalog
	// listenCtx ends the LISTEN sessions (see catalogfresh.go);
	// stopped is set once stopListeners ran.
	listenCtx  context.Context
	stopListen context.CancelFunc
	stopped    bool
	// maxAgeOverride, if set (ns), replaces catalogMaxAge; onStore, if
	// set, is called with the database of every snapshot stored. Tests
	// only.
	maxAgeOverride atomic.Int64
	onStore        atomic.Pointer[func(db string)]
}

// dbCatalog is one database's newest snapshot; sessions load it on every
// decision without a lock.
type dbCatalog struct {
	cur atomic.Pointer[sqlfacts.Catalog]
	// expires is when cur is due to be read again (Unix ns); busy is set
	// while a read that an open session asked for is in flight.
	expires atomic.Int64
	busy    atomic.Bool
	// at and reload (under catalogs.mu) say when cur was read.
	at     time.Time
	reload uint64
	// readAt is when the read of cur started (Unix ns): the age
	// freshCatalog bounds.
	readAt atomic.Int64
	// listening is set while a LISTEN session on the database is up
	// (catalogfresh.go); listenBusy while one runs or starts; listenAfter
	// (Unix ns) is when one may be tried again after it found no change
	// trigger or failed.
	listening   atomic.Bool
	listenBusy  atomic.Bool
	listenAfter atomic.Int64
	// reread makes the sessions that need a fresh snapshot share one
	// read.
	reread sync.Mutex
}

// load is the newest snapshot; nil (built-ins only) for a session that
// never logged in upstream (tests that drive decide directly).
func (e *dbCatalog) load() *sqlfacts.Catalog {
	if e == nil {
		return nil
	}
	return e.cur.Load()
}

// ensure returns db's catalog holder, its snapshot read again over conn
// (a fresh upstream session on db) if missing or stale. An error leaves the
// cache as it was; the caller denies.
func (c *catalogs) ensure(ctx context.Context, db string, conn *pgconn.PgConn, trusted []string) (*dbCatalog, error) {
	c.mu.Lock()
	e, ok := c.m[db]
	if !ok {
		e = &dbCatalog{}
		c.m[db] = e
	}
	reloads := c.reloads
	fresh := e.cur.Load() != nil && e.reload == reloads && time.Since(e.at) < c.ttl
	c.mu.Unlock()
	if fresh {
		return e, nil
	}
	// Read without the lock: a slow server must not hold up the logins
	// to other databases. Two logins may both read; the later one wins
	// unless a reload came between.
	start := time.Now()
	cat, err := LoadCatalog(ctx, conn, trusted)
	if err != nil {
		return nil, err
	}
	c.store(db, cat, reloads, start)
	return e, nil
}

// reloadCount is the reload count to store a snapshot read now under.
func (c *catalogs) reloadCount() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reloads
}

// stale makes every snapshot stale (after a reload) and returns the
// databases that have one, and the reload count to store refreshed
// snapshots under.
func (c *catalogs) stale() ([]string, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reloads++
	dbs := make([]string, 0, len(c.m))
	for db, e := range c.m {
		if e.cur.Load() != nil {
			dbs = append(dbs, db)
		}
	}
	return dbs, c.reloads
}

// store makes cat, read from start on, db's snapshot as of reload count
// reload, unless a newer one is there.
func (c *catalogs) store(db string, cat *sqlfacts.Catalog, reload uint64, start time.Time) {
	c.mu.Lock()
	e := c.m[db]
	if e == nil || e.reload > reload || e.reload == reload && start.UnixNano() < e.readAt.Load() {
		c.mu.Unlock()
		return
	}
	e.cur.Store(cat)
	e.at, e.reload = time.Now(), reload
	e.readAt.Store(start.UnixNano())
	e.expires.Store(e.at.Add(c.ttl).UnixNano())
	c.mu.Unlock()
	if f := c.onStore.Load(); f != nil {
		(*f)(db)
	}
}

// refreshCatalogs reads again, in the background, the catalog of every
// database the gate holds one of (after a reload), so that open sessions
// decide with it too. A catalog that cannot be read stays stale: the next
// login to its database reads it, or is refused.
func (g *Gate) refreshCatalogs() {
	dbs, reload := g.catalogs.stale()
	for _, db := range dbs {
		g.refreshCatalog(db, reload)
	}
}

// catalogExpired starts a background read of the session's catalog once it has
// outlived catalog_ttl, so that a long session sees new functions too; the
// session decides with the snapshot it has until the read is done.
func (s *session) catalogExpired() {
	e := s.catalog
	if e == nil || time.Now().UnixNano() < e.expires.Load() || !e.busy.CompareAndSwap(false, true) {
		return
	}
	g := s.g
	g.catalogs.mu.Lock()
	reload := g.catalogs.reloads
	g.catalogs.mu.Unlock()
	if !g.refreshCatalog(s.database, reload, func() { e.busy.Store(false) }) {
		e.busy.Store(false)
	}
}

// refreshCatalog reads db's catalog in the background and stores it as of
// reload count reload, then runs each of done. It reports whether the read
// started (not after Shutdown).
func (g *Gate) refreshCatalog(db string, reload uint64, done ...func()) bool {
	g.mu.Lock()
	if g.shutdown {
		g.mu.Unlock()
		return false
	}
	// Shutdown waits for the read like for a session.
	g.wg.Add(1)
	g.mu.Unlock()
	g.refreshing.Add(1)
	go func() {
		defer g.wg.Done()
		defer g.refreshing.Done()
		for _, f := range done {
			defer f()
		}
		ctx, cancel := context.WithTimeout(context.Background(), g.cfg.StartupTimeout)
		defer cancel()
		start := time.Now()
		cat, err := g.loadCatalog(ctx, db)
		if err != nil {
			g.log.Warn("catalog refresh failed; the next login to the database reads it", zap.String("database", db), zap.Error(err))
			return
		}
		g.catalogs.store(db, cat, reload, start)
	}()
	return true
}

// loadCatalog logs in to db as the gate does for a session (through the
// vetted dialler) and reads its catalog.
func (g *Gate) loadCatalog(ctx context.Context, db string) (*sqlfacts.Catalog, error) {
	conn, err := pgconn.ConnectConfig(ctx, g.upstreamConfig(db, nil))
	if err != nil {
		return nil, fmt.Errorf("connect upstream database %q: %w", db, err)
	}
	defer conn.Close(ctx)
	return LoadCatalog(ctx, conn, g.cfg.TrustedExtensions)
}
