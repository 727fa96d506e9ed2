// Package pggate is the Postgres gate: a PostgreSQL v3 wire-protocol
// listener that sandboxes use as their database. A client logs in as its
// sandbox identity (SCRAM-SHA-256 against the identity's stored verifier);
// the gate logs in upstream with credentials the sandbox never sees. Every
// statement of every simple Query and extended Parse is parsed with
// pg_query (policy/sqlfacts), decided by the egress.sql policy and audited
// before anything reaches the server; a denied statement is answered with
// SQLSTATE 42501 and the session stays usable.
package pggate

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/internal/metrics"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlfacts"
)

// Identities is what the gate needs of the identity table
// (*identity.Store).
type Identities interface {
	Lookup(id string) (identity.Entry, policy.Identity, bool)
}

// DialFunc dials the upstream. In production it is the dnsguard pinned
// Dialer's DialContext, so the upstream address passes the address floor.
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// Deps are the gate's collaborators. Engine and Identities can be swapped
// later with Update.
type Deps struct {
	Engine     policy.Decider
	Identities Identities
	Audit      audit.Appender
	Dial       DialFunc
	// Floor, if set, is asked again after an Update whether each open
	// session's upstream address may still be reached: an `internal:`
	// allowance removed by a reload ends the sessions it let through.
	Floor policy.Floor
	// Log is the operational logger; if nil, nothing is logged.
	Log *zap.Logger
	// Logins counts logins by decision and reason; if nil, they are not
	// counted. (Statement decisions are counted by the Audit appender the
	// caller gives, see metrics.Counting.)
	Logins *metrics.Logins
}

// Gate serves Postgres clients. It is safe for concurrent use.
type Gate struct {
	cfg  Config
	deps Deps
	log  *zap.Logger
	// failLog reports failed audit appends at most once per interval:
	// while the audit disk is full every statement fails one.
	failLog  *audit.FailLog
	upstream *pgconn.Config
	password string
	tls      *tls.Config
	limits   sqlfacts.Limits
	// marker prefixes the SQL the gate sends upstream to fail a denied
	// statement; it is random per process so no client text can forge it.
	marker   string
	fakeSalt []byte
	// verdicts caches decisions (Gate.verdict); nil when
	// postgres.cache_size is off.
	verdicts *verdictCache
	cancels  cancelTable
	// slots counts open sessions for the session caps; upstreamMaxConns
	// is the upstream's max_connections once read (0 before), learnMu
	// lets one login read it (learnMaxConns).
	slots            slotTable
	upstreamMaxConns atomic.Int64
	learnMu          sync.Mutex
	// catalogs are the upstream databases' catalogs, by database.
	catalogs catalogs
	// cur holds the engine and identity table; Update swaps them on
	// reload without touching sessions in flight.
	cur atomic.Pointer[current]

	mu    sync.Mutex
	lns   map[net.Listener]struct{}
	conns map[net.Conn]struct{}
	// sessions are the logged-in sessions, which a drain that reaches its
	// deadline ends with a message and a record (cutSession).
	sessions map[*session]sessionRef
	shutdown bool
	wg       sync.WaitGroup
	// refreshing counts the catalog refreshes in flight (tests wait on it).
	refreshing sync.WaitGroup
}

// New builds a gate. It reads the upstream password (environment or file)
// and the TLS key pair once; cfg must have been validated.
func New(cfg Config, deps Deps) (*Gate, error) {
	if deps.Engine == nil || deps.Identities == nil || deps.Audit == nil || deps.Dial == nil {
		return nil, errors.New("pggate: Engine, Identities, Audit and Dial are required")
	}
	cfg.Provision()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("postgres.%w", err)
	}
	log := deps.Log
	if log == nil {
		log = zap.NewNop()
	}
	g := &Gate{
		cfg: cfg, deps: deps, log: log.Named("pggate"),
		failLog:  audit.NewFailLog(log.Named("pggate"), 0),
		limits:   limitsOf(cfg),
		verdicts: newVerdictCache(cfg.CacheSize),
		lns:      map[net.Listener]struct{}{}, conns: map[net.Conn]struct{}{}, sessions: map[*session]sessionRef{},
	}
	g.cancels.m = map[uint32]*cancelTarget{}
	g.catalogs = catalogs{ttl: cfg.CatalogTTL, m: map[string]*dbCatalog{}}
	g.cur.Store(&current{engine: deps.Engine, ids: deps.Identities})
	nonce := make([]byte, 8)
	rand.Read(nonce)
	g.marker = "egressd_denied_" + hex.EncodeToString(nonce) + "_"
	g.fakeSalt = make([]byte, 16)
	rand.Read(g.fakeSalt)
	var err error
	if g.upstream, g.password, g.tls, err = load(cfg); err != nil {
		return nil, err
	}
	return g, nil
}

// Check refuses a provisioned and validated cfg that New would refuse:
// an upstream that does not parse, an upstream password or TLS key pair
// that cannot be read. It binds and dials nothing; it is `egressd serve
// --check`'s gate step.
func Check(cfg Config) error {
	cfg.Provision()
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("postgres.%w", err)
	}
	_, _, _, err := load(cfg)
	return err
}

// load reads what the gate holds from start: the upstream's connection
// config, its password, and the TLS config offered to clients (nil
// without tls_cert).
func load(cfg Config) (*pgconn.Config, string, *tls.Config, error) {
	upstream, err := pgconn.ParseConfig(cfg.Upstream)
	if err != nil {
		return nil, "", nil, fmt.Errorf("postgres.upstream: %w", err)
	}
	password, err := upstreamPassword(cfg)
	if err != nil {
		return nil, "", nil, err
	}
	if cfg.TLSCert == "" {
		return upstream, password, nil, nil
	}
	cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
	if err != nil {
		return nil, "", nil, fmt.Errorf("postgres.tls_cert: %w", err)
	}
	return upstream, password, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// upstreamPassword reads the upstream password from the environment
// variable or file the config names; "" if it names neither.
func upstreamPassword(cfg Config) (string, error) {
	switch {
	case cfg.PasswordEnv != "":
		pw, ok := os.LookupEnv(cfg.PasswordEnv)
		if !ok {
			return "", fmt.Errorf("postgres.password_env: environment variable %s is not set", cfg.PasswordEnv)
		}
		return pw, nil
	case cfg.PasswordFile != "":
		b, err := os.ReadFile(cfg.PasswordFile)
		if err != nil {
			return "", fmt.Errorf("postgres.password_file: %w", err)
		}
		pw, _, _ := strings.Cut(strings.TrimRight(string(b), "\r\n"), "\n")
		return pw, nil
	}
	return "", nil
}

type current struct {
	engine policy.Decider
	ids    Identities
}

// Reload makes new logins and decisions use engine and ids (after a policy
// or identity reload). A logged-in session keeps the identity it logged in
// with; its next statement is decided by the new engine, and the decision
// cache, keyed by the bundle digest, never serves the old bundle's answers.
// Every database's catalog is read again, in the background and at its
// next login.
func (g *Gate) Reload(engine policy.Decider, ids *identity.Store) {
	if engine == nil || ids == nil {
		return
	}
	g.cur.Store(&current{engine: engine, ids: ids})
	g.refreshCatalogs()
}

func (g *Gate) engine() policy.Decider { return g.cur.Load().engine }

// ErrClosed is returned by Serve after Shutdown.
var ErrClosed = errors.New("pggate: closed")

// Serve accepts clients on ln until ln fails or Shutdown is called.
func (g *Gate) Serve(ln net.Listener) error {
	g.mu.Lock()
	if g.shutdown {
		g.mu.Unlock()
		return ErrClosed
	}
	g.lns[ln] = struct{}{}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		delete(g.lns, ln)
		g.mu.Unlock()
	}()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			g.mu.Lock()
			closed := g.shutdown
			g.mu.Unlock()
			if closed {
				return ErrClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		if !g.track(c) {
			c.Close()
			return ErrClosed
		}
		go func() {
			defer g.untrack(c)
			g.serveConn(c)
		}()
	}
}

func (g *Gate) track(c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shutdown {
		return false
	}
	g.conns[c] = struct{}{}
	g.wg.Add(1)
	return true
}

func (g *Gate) untrack(c net.Conn) {
	g.mu.Lock()
	delete(g.conns, c)
	g.mu.Unlock()
	g.wg.Done()
}

// Shutdown stops accepting, waits for sessions to end until ctx is done,
// then ends the rest: each logged-in session is recorded and told, as
// PostgreSQL tells its clients at a shutdown (FATAL 57P01, reason
// shutting_down); a connection still logging in is closed (its login is
// refused with the same reason if it completes first).
func (g *Gate) Shutdown(ctx context.Context) error {
	g.catalogs.stopListeners()
	g.mu.Lock()
	g.shutdown = true
	for ln := range g.lns {
		ln.Close()
	}
	g.mu.Unlock()
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	cut := maps.Clone(g.sessions)
	g.mu.Unlock()
	var wg sync.WaitGroup
	for s, ref := range cut {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.cutSession(s, ref)
		}()
	}
	wg.Wait()
	g.mu.Lock()
	for c := range g.conns {
		c.Close()
	}
	g.mu.Unlock()
	<-done
	return ctx.Err()
}

// Ready reports whether the upstream accepts connections, for /readyz: a
// login would otherwise be refused upstream_unavailable. It connects
// through the same floor-checked dialer as a login and closes at once
// (logging in on every probe would cost the server a backend process).
func (g *Gate) Ready(ctx context.Context) error {
	network, addr := pgconn.NetworkAddress(g.upstream.Host, g.upstream.Port)
	c, err := g.deps.Dial(ctx, network, addr)
	if err != nil {
		return fmt.Errorf("upstream %s does not accept connections: %w", addr, err)
	}
	c.Close()
	return nil
}

// sessionRef is what a session's shutdown record names, copied at login:
// the session's goroutine owns its fields.
type sessionRef struct{ id, remote, database string }

// addSession tracks a logged-in session, unless the gate is shutting down.
func (g *Gate) addSession(s *session) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shutdown {
		return false
	}
	g.sessions[s] = sessionRef{id: s.identity.ID, remote: s.remote, database: s.database}
	return true
}

func (g *Gate) removeSession(s *session) {
	g.mu.Lock()
	delete(g.sessions, s)
	g.mu.Unlock()
}

// cutSession ends a session the drain did not see end: a record with
// reason shutting_down, then FATAL 57P01 to the client, then both
// connections closed.
func (g *Gate) cutSession(s *session, ref sessionRef) {
	r := audit.Decided(audit.KindSQL, ref.id, ref.remote, audit.Verdict{Reason: policy.ReasonShuttingDown, Policy: g.engine().Digest()})
	r.Database, r.Error = ref.database, "session ended by egressd's shutdown"
	if err := g.deps.Audit.Append(r); err != nil {
		g.failLog.Failed(err)
	}
	s.sendClientFatal(sessionRefusal(policy.ReasonShuttingDown, "egressd: terminating connection because egressd is shutting down"))
	s.close()
}
