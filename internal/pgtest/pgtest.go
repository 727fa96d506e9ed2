// Package pgtest starts a real PostgreSQL for tests: initdb into a fresh
// temporary directory owned by the postgres user, the server run as that
// user on a free loopback port with its unix sockets in the same directory,
// and everything stopped and removed in cleanup. The binaries come from
// Debian's packages (/usr/lib/postgresql/*/bin). A missing binary is an
// error, never a skip: a test that needs PostgreSQL must not pass without it.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testport"
	"github.com/jackc/pgx/v5/pgconn"
)

// Superuser credentials of every test cluster.
const (
	SuperUser     = "postgres"
	SuperPassword = "pgtest-superuser-password"
)

// Options configure a cluster.
type Options struct {
	// HostAuth is the pg_hba method for TCP connections: "scram-sha-256",
	// "md5", "password" or "trust". If empty, "scram-sha-256" is used.
	HostAuth string
	// Settings are extra `-c name=value` server settings.
	Settings map[string]string
}

// Server is one running (or stopped) cluster.
type Server struct {
	BinDir string
	Dir    string // temporary root, removed by Close
	Port   int

	mu  sync.Mutex
	cmd *exec.Cmd
	opt Options
}

// BinDir returns the newest /usr/lib/postgresql/*/bin that has initdb,
// postgres and pgbench.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		ok := true
		for _, b := range []string{"initdb", "postgres", "pgbench"} {
			if _, err := os.Stat(filepath.Join(d, b)); err != nil {
				ok = false
			}
		}
		if ok {
			return d, nil
		}
	}
	return "", errors.New("pgtest: no PostgreSQL binaries in /usr/lib/postgresql/*/bin (install the postgresql and postgresql-contrib packages)")
}

func version(dir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return v
}

// Start creates and starts a cluster, failing t if it cannot, and stops it
// in t's cleanup.
func Start(t testing.TB, opt Options) *Server {
	t.Helper()
	s, err := New(opt)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// New creates and starts a cluster. The caller must Close it.
func New(opt Options) (*Server, error) {
	if opt.HostAuth == "" {
		opt.HostAuth = "scram-sha-256"
	}
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	pg, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtest: the postgres user is missing: %w", err)
	}
	uid, _ := strconv.Atoi(pg.Uid)
	gid, _ := strconv.Atoi(pg.Gid)
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	s := &Server{BinDir: bin, Dir: dir, opt: opt}
	if err := s.initdb(uid, gid); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	if err := s.Start(); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return s, nil
}

// initdb makes the cluster owned by the postgres user: PostgreSQL refuses
// to run as root.
func (s *Server) initdb(uid, gid int) error {
	if err := os.Chmod(s.Dir, 0o755); err != nil {
		return err
	}
	pw := filepath.Join(s.Dir, "pwfile")
	if err := os.WriteFile(pw, []byte(SuperPassword+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.Chown(pw, uid, gid); err != nil {
		return err
	}
	data := filepath.Join(s.Dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		return err
	}
	if err := os.Chown(data, uid, gid); err != nil {
		return err
	}
	if err := os.Chown(s.Dir, uid, gid); err != nil {
		return err
	}
	out, err := exec.Command("runuser", "-u", "postgres", "--",
		filepath.Join(s.BinDir, "initdb"), "-D", data, "-U", SuperUser,
		"--pwfile", pw, "--auth-local=trust", "--auth-host="+s.opt.HostAuth,
		"-E", "UTF8", "--locale=C", "--no-sync").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgtest: initdb: %w\n%s", err, out)
	}
	return nil
}

// Start starts the (stopped) server on its port, choosing a free loopback
// port the first time, and waits until it accepts connections.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("pgtest: already running")
	}
	release := func() {}
	if s.Port == 0 {
		// Held until just before postgres starts: a port released at
		// once could be taken by another test's server meanwhile.
		held, err := testport.Reserve()
		if err != nil {
			return err
		}
		defer held.Release()
		s.Port = held.Port
		release = held.Release
	}
	args := []string{"-u", "postgres", "--", filepath.Join(s.BinDir, "postgres"),
		"-D", filepath.Join(s.Dir, "data"), "-p", strconv.Itoa(s.Port),
		"-k", s.Dir, "-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=60", "-c", "shared_buffers=32MB"}
	keys := make([]string, 0, len(s.opt.Settings))
	for k := range s.opt.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-c", k+"="+s.opt.Settings[k])
	}
	cmd := exec.Command("runuser", args...)
	logf, err := os.OpenFile(filepath.Join(s.Dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() //nolint:errcheck // the server log, for a human reading a failure; the server holds its own descriptor
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	release()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, err := pgconn.Connect(ctx, s.DSN("postgres"))
		cancel()
		if err == nil {
			c.Close(context.Background())
			return nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.Dir, "server.log"))
			s.stopLocked()
			return fmt.Errorf("pgtest: postgres did not become ready: %w\n%s", err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop shuts the server down (fast mode) and waits for it to exit.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

func (s *Server) stopLocked() {
	if s.cmd == nil {
		return
	}
	// SIGINT to the postmaster is a fast shutdown; runuser passes it on.
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGINT)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	s.cmd = nil
}

// Close stops the server and removes its directory.
func (s *Server) Close() {
	s.Stop()
	_ = os.RemoveAll(s.Dir) // a temporary directory: nothing depends on its removal
}

// Addr is the server's TCP address.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// DSN is a superuser connection string over TCP to database db.
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s password=%s dbname=%s sslmode=disable", s.Port, SuperUser, SuperPassword, db)
}

// Exec runs sql as the superuser over the unix socket, for fixtures.
func (s *Server) Exec(ctx context.Context, db, sql string) error {
	c, err := pgconn.Connect(ctx, fmt.Sprintf("host=%s port=%d user=%s dbname=%s", s.Dir, s.Port, SuperUser, db))
	if err != nil {
		return fmt.Errorf("pgtest: connect: %w", err)
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, sql).ReadAll()
	if err != nil {
		return fmt.Errorf("pgtest: exec %q: %w", firstLine(sql), err)
	}
	return nil
}

// Bin is the path of one of the cluster's binaries (psql, pgbench, …).
func (s *Server) Bin(name string) string { return filepath.Join(s.BinDir, name) }

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + "…"
	}
	return s
}
