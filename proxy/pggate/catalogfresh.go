package pggate

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/egressd/egressd/policy"
)

// A function, operator, cast, view or policy the DBA creates changes what
// a statement can reach, and PostgreSQL has no cheap marker of such a
// change to poll. The gate learns of it in one of two ways:
//
//   - With the change trigger (deploy/catalog-notify.sql, installed by a
//     superuser in each database), every DDL statement notifies
//     notifyChannel; the gate keeps one LISTEN session per database it
//     serves and reads the catalog again on each notification, so a
//     change is seen milliseconds after it commits.
//   - Without it, fail closed: a decision whose snapshot is older than
//     catalogMaxAge reads the catalog again first (one read per database
//     at a time; the sessions waiting on it share it), and a read that
//     fails denies the statement catalog_unavailable. So a change is seen
//     by every decision made more than catalogMaxAge after it committed,
//     for the cost of at most one catalog read per database every
//     catalogMaxAge while statements arrive.
//
// Every decision is held to the bound, not only those that resolve a
// call: a view, a policy or an implicit cast created behind the gate's
// back reaches statements that name no function at all.

// catalogMaxAge is the oldest snapshot a decision uses on a database
// without the change trigger.
const catalogMaxAge = 2 * time.Second

// notifyChannel and notifyTrigger are deploy/catalog-notify.sql's channel
// and event trigger.
const (
	notifyChannel = "egressd_catalog"
	notifyTrigger = "egressd_catalog_notify"
)

// maxAge is catalogMaxAge, or the tests' override.
func (c *catalogs) maxAge() time.Duration {
	if d := c.maxAgeOverride.Load(); d > 0 {
		return time.Duration(d)
	}
	return catalogMaxAge
}

// listenContext is the context the LISTEN sessions run under; false
// after stopListeners.
func (c *catalogs) listenContext() (context.Context, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil, false
	}
	if c.listenCtx == nil {
		c.listenCtx, c.stopListen = context.WithCancel(context.Background())
	}
	return c.listenCtx, true
}

// stopListeners ends every LISTEN session (at Shutdown) and starts no
// more.
func (c *catalogs) stopListeners() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	if c.stopListen != nil {
		c.stopListen()
	}
}

// freshCatalog makes the session's catalog snapshot one a decision may
// use (see above). It returns nil, or the verdict that denies the
// statement, audited, when the catalog could not be read.
func (s *session) freshCatalog() *verdict {
	e := s.catalog
	if e == nil {
		return nil
	}
	g := s.g
	g.listenCatalog(s.database, e)
	maxAge := g.catalogs.maxAge()
	if e.listening.Load() || time.Now().UnixNano()-e.readAt.Load() < int64(maxAge) {
		s.catalogExpired()
		return nil
	}
	if err := g.rereadCatalog(s.database, e, maxAge); err != nil {
		g.log.Warn("catalog re-read failed; statement denied", zap.String("database", s.database), zap.Error(err))
		s.auditRefusal(policy.ReasonCatalogUnavailable)
		return &verdict{reason: policy.ReasonCatalogUnavailable}
	}
	return nil
}

// rereadCatalog reads db's catalog now, unless a read that started within
// maxAge (another session's, which this one waited for) is already there.
func (g *Gate) rereadCatalog(db string, e *dbCatalog, maxAge time.Duration) error {
	e.reread.Lock()
	defer e.reread.Unlock()
	if time.Now().UnixNano()-e.readAt.Load() < int64(maxAge) {
		return nil
	}
	reload := g.catalogs.reloadCount()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.StartupTimeout)
	defer cancel()
	cat, err := g.loadCatalog(ctx, db)
	if err != nil {
		return err
	}
	g.catalogs.store(db, cat, reload, start)
	return nil
}

// listenCatalog starts a LISTEN session on db unless one runs, or the last
// attempt (which found no change trigger, or failed) was less than
// catalog_ttl ago.
func (g *Gate) listenCatalog(db string, e *dbCatalog) {
	if e.listening.Load() || time.Now().UnixNano() < e.listenAfter.Load() || !e.listenBusy.CompareAndSwap(false, true) {
		return
	}
	ctx, ok := g.catalogs.listenContext()
	g.mu.Lock()
	if !ok || g.shutdown {
		g.mu.Unlock()
		e.listenBusy.Store(false)
		return
	}
	// Shutdown waits for the session; stopListeners ends it.
	g.wg.Add(1)
	g.mu.Unlock()
	go func() {
		defer g.wg.Done()
		err := g.listen(ctx, db, e)
		e.listening.Store(false)
		e.listenAfter.Store(time.Now().Add(g.cfg.CatalogTTL).UnixNano())
		e.listenBusy.Store(false)
		if err != nil && ctx.Err() == nil {
			g.log.Warn("catalog change listener ended; decisions re-read the catalog when it is older than the max age",
				zap.String("database", db), zap.Duration("max_age", g.catalogs.maxAge()), zap.Error(err))
		}
	}()
}

// listen runs a LISTEN session on db while the change trigger is
// installed there: it reads the catalog after LISTEN (so no change falls
// between the two) and again after every notification, until ctx ends or
// the connection fails. It returns nil at once when the trigger is not
// installed.
func (g *Gate) listen(ctx context.Context, db string, e *dbCatalog) error {
	var pending atomic.Bool
	cfg := g.upstreamConfig(db, nil)
	// Notifications that arrive while the catalog is being read are
	// seen here; WaitForNotification sees the rest.
	cfg.OnNotification = func(*pgconn.PgConn, *pgconn.Notification) { pending.Store(true) }
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect upstream database %q: %w", db, err)
	}
	defer func() {
		// ctx may have ended: close with a bound of its own.
		cctx, cancel := context.WithTimeout(context.Background(), g.cfg.StartupTimeout)
		defer cancel()
		conn.Close(cctx)
	}()
	res := conn.ExecParams(ctx, `SELECT 1 FROM pg_catalog.pg_event_trigger WHERE evtname = $1 AND evtenabled <> 'D'`,
		[][]byte{[]byte(notifyTrigger)}, nil, nil, nil).Read()
	if res.Err != nil {
		return fmt.Errorf("look up the change trigger: %w", res.Err)
	}
	if len(res.Rows) == 0 {
		return nil
	}
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel).ReadAll(); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	for {
		pending.Store(false)
		reload := g.catalogs.reloadCount()
		start := time.Now()
		cat, err := LoadCatalog(ctx, conn, g.cfg.TrustedExtensions)
		if err != nil {
			return err
		}
		g.catalogs.store(db, cat, reload, start)
		e.listening.Store(true)
		if pending.Load() {
			continue
		}
		if err := conn.WaitForNotification(ctx); err != nil {
			return fmt.Errorf("wait for a catalog change: %w", err)
		}
	}
}
