package pggate

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/internal/pgtest"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlparse"
)

const (
	passRO = "pw-read-only"
	passRW = "pw-read-write"
)

// The tests share one PostgreSQL cluster (starting one costs seconds),
// started by the first test that needs it, so the fuzz targets run with no
// PostgreSQL at all. Tests that stop their server start their own.
var (
	sharedOnce sync.Once
	shared     *pgtest.Server
	sharedErr  error
)

func sharedPG(t testing.TB) *pgtest.Server {
	t.Helper()
	sharedOnce.Do(func() {
		shared, sharedErr = pgtest.New(pgtest.Options{})
		if sharedErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sharedErr = shared.Exec(ctx, "postgres", `CREATE DATABASE app`)
		if sharedErr == nil {
			sharedErr = shared.Exec(ctx, "app", `
			CREATE TABLE users (id int PRIMARY KEY, name text NOT NULL);
			INSERT INTO users VALUES (1, 'ada'), (2, 'grace'), (3, 'edsger');
			CREATE TABLE items (id int PRIMARY KEY, note text);
			CREATE SCHEMA private;
			CREATE TABLE private.secrets (k text);
			INSERT INTO private.secrets VALUES ('s3cr3t');`)
		}
	})
	if sharedErr != nil {
		t.Fatalf("pgtest: %v", sharedErr)
	}
	return shared
}

// TestMain switches the SQL parser worker on (a deep text is parsed in a
// re-run of this test binary, which serves there instead of testing), and
// after the tests stops the shared PostgreSQL, then fails the package's
// tests if any goroutine (a session's relay, a client-gone watcher, a
// catalog refresh) outlives them.
func TestMain(m *testing.M) {
	sqlparse.EnableWorkers()
	code := m.Run()
	if shared != nil {
		shared.Close()
	}
	if code == 0 {
		// policy/sqlparse keeps up to two parser worker processes idle for
		// the life of the process (its pool, started by the first deep
		// text); os/exec copies each one's stderr to io.Discard in a
		// goroutine that lives as long as the worker. That is by design,
		// not a leak. The pool has no Close, so the goroutine is ignored
		// by its function: a worker leaked outside the pool would be
		// ignored too.
		if err := goleak.Find(goleak.IgnoreAnyFunction("os/exec.(*Cmd).writerDescriptor.func1")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	engineOnce sync.Once
	engine     *policy.Engine
	engineErr  error
)

// testEngine is the real policy engine on the repository's SQL modules
// (with the base module they share), so the gate's tests decide exactly as
// the shipped bundle does without depending on the other entry points.
func testEngine(t testing.TB) *policy.Engine {
	engineOnce.Do(func() { engine, engineErr = newTestEngine(0) })
	if engineErr != nil {
		t.Fatalf("policy.New: %v", engineErr)
	}
	return engine
}

// newTestEngine loads the repository's SQL modules with a decision cache
// of cacheSize entries (-1: none; 0: the default).
func newTestEngine(cacheSize int) (*policy.Engine, error) {
	dir, err := os.MkdirTemp("", "pggate-bundle-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir) //nolint:errcheck // a temporary directory; a leftover is harmless
	for _, f := range []string{"base.rego", "sql.rego", "sql_test.rego", "sql_fixtures_test.rego", "sql/data.json"} {
		b, err := os.ReadFile(filepath.Join("../../rego", f))
		if err == nil {
			err = os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, f), b, 0o644)
		}
		if err != nil {
			return nil, err
		}
	}
	cfg := policy.DefaultConfig()
	cfg.Dir = dir
	if cacheSize != 0 {
		cfg.CacheSize = cacheSize
	}
	// These tests check decisions, not evaluation time: the default
	// 100 ms turned a cold decision of a long analyst query into
	// policy_timeout on a loaded machine.
	cfg.EvalTimeout = 10 * time.Second
	return policy.New(context.Background(), cfg, zap.NewNop())
}

// testVerifiers are the test identities' SCRAM verifiers, made once: a
// verifier has a random salt, and a reload with a different one is a
// rotated password.
var testVerifiers = sync.OnceValues(func() ([2]string, error) {
	ro, err := identity.SCRAMVerifier(passRO, nil, 0)
	if err != nil {
		return [2]string{}, err
	}
	rw, err := identity.SCRAMVerifier(passRW, nil, 0)
	return [2]string{ro, rw}, err
})

func testIdentities(t testing.TB) *identity.Store {
	t.Helper()
	v, err := testVerifiers()
	if err != nil {
		t.Fatal(err)
	}
	ro, rw := v[0], v[1]
	st, err := identity.New(identity.Config{
		{ID: "agent-ro", SCRAMSHA256: ro, Attributes: map[string]string{"sql_profile": "read_only"}},
		{ID: "agent-rw", SCRAMSHA256: rw, Attributes: map[string]string{"sql_profile": "read_write"}},
		{ID: "agent-none", SCRAMSHA256: ro},
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

type fixture struct {
	gate  *Gate
	addr  string
	audit *audittest.Recorder
	srv   *pgtest.Server
}

// startGate runs a gate in front of srv on a loopback port.
func startGate(t testing.TB, srv *pgtest.Server, mod func(*Config)) *fixture {
	t.Helper()
	return startGateAudit(t, srv, mod, nil)
}

// startGateAudit is startGate with the gate appending through wrap(the
// fixture's recorder) when wrap is not nil (an audit.Meter, say).
func startGateAudit(t testing.TB, srv *pgtest.Server, mod func(*Config), wrap func(*audittest.Recorder) audit.Appender) *fixture {
	t.Helper()
	return startGateWith(t, srv, mod, wrap, zap.NewNop())
}

// startGateWith is startGateAudit with the gate logging to log.
func startGateWith(t testing.TB, srv *pgtest.Server, mod func(*Config), wrap func(*audittest.Recorder) audit.Appender, log *zap.Logger) *fixture {
	t.Helper()
	t.Setenv("PGGATE_TEST_PASSWORD", pgtest.SuperPassword)
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Upstream = fmt.Sprintf("postgres://%s@%s/?sslmode=disable", pgtest.SuperUser, srv.Addr())
	cfg.PasswordEnv = "PGGATE_TEST_PASSWORD"
	if mod != nil {
		mod(&cfg)
	}
	a := &audittest.Recorder{}
	var app audit.Appender = a
	if wrap != nil {
		app = wrap(a)
	}
	var d net.Dialer
	g, err := New(cfg, Deps{Engine: testEngine(t), Identities: testIdentities(t), Audit: app, Dial: d.DialContext, Log: log})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &fixture{gate: g, addr: pgtest.ServeGate(t, g), audit: a, srv: srv}
}

func (f *fixture) dsn(user, password, db string) string {
	host, port, _ := net.SplitHostPort(f.addr)
	return fmt.Sprintf("host=%s port=%s user=%s password=%s dbname=%s sslmode=disable", host, port, user, password, db)
}

func connect(t testing.TB, dsn string) *pgconn.PgConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func pgtestStart(t *testing.T) *pgtest.Server { return pgtest.Start(t, pgtest.Options{}) }
