package pggate

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/egressd/egressd/policy/sqlfacts"
)

// ReasonCatalogUnavailable denies a login whose database's catalog could
// not be read: without it a call could reach a user function unseen.
const ReasonCatalogUnavailable = "catalog_unavailable"

// catalogQuery lists what a database defines beyond the built-ins, one row
// per item: kind, schema, name, function schema, function name, implicit.
// 'b' rows are pg_catalog's function names; 'f' every function elsewhere;
// 'o' every operator outside pg_catalog or calling a function outside it;
// 'c' every cast calling a function outside pg_catalog. information_schema
// is the server's own and counts as built-in.
const catalogQuery = `
SELECT 'b', '', p.proname, '', '', false
  FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'pg_catalog'::pg_catalog.regnamespace GROUP BY p.proname
UNION ALL
SELECT 'f', n.nspname, p.proname, '', '', false
  FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
UNION ALL
SELECT 'o', n.nspname, o.oprname, fn.nspname, f.proname, false
  FROM pg_catalog.pg_operator o
  JOIN pg_catalog.pg_namespace n ON n.oid = o.oprnamespace
  JOIN pg_catalog.pg_proc f ON f.oid = o.oprcode
  JOIN pg_catalog.pg_namespace fn ON fn.oid = f.pronamespace
 WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') OR fn.nspname NOT IN ('pg_catalog', 'information_schema')
UNION ALL
SELECT 'c', '', t.typname, fn.nspname, f.proname, c.castcontext <> 'e'
  FROM pg_catalog.pg_cast c
  JOIN pg_catalog.pg_type t ON t.oid = c.casttarget
  JOIN pg_catalog.pg_proc f ON f.oid = c.castfunc
  JOIN pg_catalog.pg_namespace fn ON fn.oid = f.pronamespace
 WHERE fn.nspname NOT IN ('pg_catalog', 'information_schema')`

// LoadCatalog reads the catalog of the database conn is connected to.
func LoadCatalog(ctx context.Context, conn *pgconn.PgConn) (*sqlfacts.Catalog, error) {
	res := conn.ExecParams(ctx, catalogQuery, nil, nil, nil, nil).Read()
	if res.Err != nil {
		return nil, fmt.Errorf("read catalog: %w", res.Err)
	}
	var builtins []string
	var funcs []sqlfacts.Function
	var ops []sqlfacts.CatalogOperator
	var casts []sqlfacts.CatalogCast
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
	return sqlfacts.NewCatalog(builtins, funcs, ops, casts), nil
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
	return LoadCatalog(ctx, conn)
}

// catalogs caches each database's catalog. A snapshot is refreshed at the
// start of a session to its database when it is older than the TTL or
// older than the last reload; a session decides with the newest snapshot
// of its database.
type catalogs struct {
	ttl time.Duration

	mu sync.Mutex
	// reloads counts Update calls: a snapshot taken before the latest is
	// stale.
	reloads uint64
	m       map[string]*dbCatalog
}

// dbCatalog is one database's newest snapshot; sessions load it on every
// decision without a lock.
type dbCatalog struct {
	cur atomic.Pointer[sqlfacts.Catalog]
	// at and reload (under catalogs.mu) say when cur was read.
	at     time.Time
	reload uint64
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
func (c *catalogs) ensure(ctx context.Context, db string, conn *pgconn.PgConn) (*dbCatalog, error) {
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
	// to other databases. Two logins may both read; the later one wins.
	cat, err := LoadCatalog(ctx, conn)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	e.cur.Store(cat)
	e.at, e.reload = time.Now(), reloads
	c.mu.Unlock()
	return e, nil
}

// stale makes every snapshot stale (after a reload).
func (c *catalogs) stale() {
	c.mu.Lock()
	c.reloads++
	c.mu.Unlock()
}
