package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/internal/pgtest"
)

// pgbench through the egressd gate (every statement parsed, decided and
// audited), PgBouncer in session mode (parses nothing) and a bare Go
// relay, with PostgreSQL as the origin on the load core. PostgreSQL runs as
// the postgres user through pgtest, as the e2e tests run it.

var (
	tpsRe  = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
	txnsRe = regexp.MustCompile(`number of transactions actually processed: ([0-9]+)`)
)

// pgMode is one pgbench script.
type pgMode struct {
	id, title string
	args      []string
	identity  string // the gate identity whose profile allows the script
}

var pgModes = []pgMode{
	{"pgbench-S", "pgbench -S, simple protocol", []string{"-S"}, "agent-ro"},
	{"pgbench-S-extended", "pgbench -S -M extended", []string{"-S", "-M", "extended"}, "agent-ro"},
	{"pgbench-tpcb", "pgbench TPC-B", nil, "agent-rw"},
}

// pgTarget is where pgbench connects, as whom.
type pgTarget struct {
	name, kind string
	p          *running // nil: direct
	super      bool     // log in as the superuser (direct, PgBouncer, relay)
}

const gatePassword = "bench-gate-secret"

func (b *bench) pgWorkloads() []*Workload {
	var wls []*Workload
	for _, m := range pgModes {
		wls = append(wls, &Workload{ID: m.id, Title: m.title, Unit: "tps", CPUUnit: "µs per transaction",
			Note: fmt.Sprintf("`%s`, scale %d; CPU of the proxy's processes per transaction.",
				strings.Join(append([]string{"pgbench", "-n", "-c", strconv.Itoa(b.o.pgClients), "-j", "2", "-T", strconv.Itoa(b.o.pgSeconds)}, m.args...), " "), b.o.pgScale)})
	}
	fail := func(err error) []*Workload {
		for _, wl := range wls {
			wl.target("egressd gate", kindEgressd).fail("error: " + err.Error())
		}
		return wls
	}
	pg, err := pgtest.New(pgtest.Options{Settings: map[string]string{"max_connections": "100"}})
	if err != nil {
		return fail(err)
	}
	atExit(pg.Close)
	defer pg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := pg.Exec(ctx, "postgres", "CREATE DATABASE bench"); err != nil {
		return fail(err)
	}
	if out, err := b.pgbench(pg, pg.Port, pgtest.SuperUser, pgtest.SuperPassword, "-i", "-q", "-s", strconv.Itoa(b.o.pgScale)); err != nil {
		return fail(fmt.Errorf("pgbench -i: %w\n%s", err, out))
	}

	targets := []*pgTarget{{name: "direct", kind: kindDirect, super: true}}
	add := func(name, kind string, super bool, start func() (*running, error)) {
		p, err := start()
		if err != nil {
			for _, wl := range wls {
				wl.target(name, kind).fail("error: " + err.Error())
			}
			return
		}
		targets = append(targets, &pgTarget{name: name, kind: kind, p: p, super: super})
	}
	add("egressd gate", kindEgressd, false, func() (*running, error) { return b.startGate(pg) })
	add("pgbouncer (session)", kindPeer, true, func() (*running, error) { return b.startPgbouncer(pg) })
	add("pg relay", kindCeiling, true, func() (*running, error) { return b.startPgRelay(pg) })
	for _, t := range targets {
		if t.p != nil {
			defer t.p.stop()
		}
	}

	for round := range b.o.pgRounds {
		for i, m := range pgModes {
			for _, t := range targets {
				var prof *running
				if t.kind == kindEgressd {
					prof = t.p
				}
				b.withProfile(prof, m.id, round, time.Duration(b.o.pgSeconds-1)*time.Second, func() {
					b.pgRound(wls[i].target(t.name, t.kind), pg, m, t)
				})
			}
		}
	}
	return wls
}

// pgRound runs one pgbench for t in mode m.
func (b *bench) pgRound(wt *Target, pg *pgtest.Server, m pgMode, t *pgTarget) {
	if wt.Status != "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if m.identity == "agent-rw" {
		// What pgbench does before a TPC-B run unless -n; the gate would
		// deny VACUUM, so it is done here, directly.
		for _, sql := range []string{"VACUUM pgbench_branches, pgbench_tellers", "TRUNCATE pgbench_history"} {
			if err := pg.Exec(ctx, "bench", sql); err != nil {
				wt.fail("error: " + err.Error())
				return
			}
		}
	}
	port, user, pass := pg.Port, pgtest.SuperUser, pgtest.SuperPassword
	var c0 float64
	if t.p != nil {
		port = portOf(t.p.addr)
		c0 = t.p.cpu().Seconds()
	}
	if !t.super {
		user, pass = m.identity, gatePassword
	}
	args := append([]string{"-n", "-c", strconv.Itoa(b.o.pgClients), "-j", "2", "-T", strconv.Itoa(b.o.pgSeconds)}, m.args...)
	out, err := b.pgbench(pg, port, user, pass, args...)
	if err != nil {
		wt.fail(fmt.Sprintf("error: pgbench: %v: %s", err, lastLines(out, 3)))
		return
	}
	tps, txns := tpsRe.FindStringSubmatch(out), txnsRe.FindStringSubmatch(out)
	if tps == nil || txns == nil {
		wt.fail("error: no tps in pgbench output: " + lastLines(out, 3))
		return
	}
	r := Round{}
	r.Rate, _ = strconv.ParseFloat(tps[1], 64)
	n, _ := strconv.ParseFloat(txns[1], 64)
	if t.p != nil && n > 0 {
		r.CPU = (t.p.cpu().Seconds() - c0) * 1e6 / n
	}
	wt.Rounds = append(wt.Rounds, r)
	b.progress("%s: %s %.0f tps, %.1f µs CPU/txn", wt.Name, m.id, r.Rate, r.CPU)
}

// pgbench runs pgbench (on this process's core) against bench on port.
func (b *bench) pgbench(pg *pgtest.Server, port int, user, pass string, args ...string) (string, error) {
	args = append(args, "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", user, "bench")
	cmd := exec.Command(pg.Bin("pgbench"), args...)
	cmd.Env = append(os.Environ(), "PGPASSWORD="+pass, "PGSSLMODE=disable")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func portOf(addr string) int {
	i := strings.LastIndexByte(addr, ':')
	p, _ := strconv.Atoi(addr[i+1:])
	return p
}

// startGate runs egressd with its Postgres gate in front of pg: agent-ro
// (read_only profile) and agent-rw (read_write), one password.
func (b *bench) startGate(pg *pgtest.Server) (*running, error) {
	ver, err := identity.SCRAMVerifier(gatePassword, nil, 0)
	if err != nil {
		return nil, err
	}
	pw := filepath.Join(b.work, "pg-upstream-password")
	if err := os.WriteFile(pw, []byte(pgtest.SuperPassword+"\n"), 0o600); err != nil {
		return nil, err
	}
	listen := loopback()
	gate := fmt.Sprintf(`postgres:
  listen: %s
  upstream: "host=127.0.0.1 port=%d user=%s sslmode=disable"
  password_file: %s
  max_sessions: 50
  max_sessions_per_identity: 50
identities:
  - id: agent-ro
    scram_sha256: %q
    attributes: {sql_profile: read_only}
  - id: agent-rw
    scram_sha256: %q
    attributes: {sql_profile: read_write}
`, listen, pg.Port, pgtest.SuperUser, pw, ver, ver)
	r, err := b.startEgressd("egressd-gate", b.o.proxyCPU, egressdOpts{gate: gate, ports: []int{pg.Port}})
	if err != nil {
		return nil, err
	}
	if err := waitTCP(r.proc, listen, 30*time.Second); err != nil {
		r.stop()
		return nil, err
	}
	r.addr = listen
	return r, nil
}

// startPgbouncer runs PgBouncer 1.18 in session mode as the postgres user
// (it refuses root), SCRAM for clients, connection logging off.
func (b *bench) startPgbouncer(pg *pgtest.Server) (*running, error) {
	d, err := b.dir("pgbouncer", "")
	if err != nil {
		return nil, err
	}
	addr := loopback()
	ini := fmt.Sprintf(`[databases]
bench = host=127.0.0.1 port=%d dbname=bench
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = scram-sha-256
auth_file = %s/userlist.txt
pool_mode = session
max_client_conn = 200
default_pool_size = 50
log_connections = 0
log_disconnections = 0
logfile = %s/pgbouncer.log
pidfile = %s/pgbouncer.pid
`, pg.Port, portOf(addr), d, d, d)
	if err := os.WriteFile(filepath.Join(d, "pgbouncer.ini"), []byte(ini), 0o600); err != nil {
		return nil, err
	}
	users := fmt.Sprintf("%q %q\n", pgtest.SuperUser, pgtest.SuperPassword)
	if err := os.WriteFile(filepath.Join(d, "userlist.txt"), []byte(users), 0o600); err != nil {
		return nil, err
	}
	if err := chownR(d, "postgres"); err != nil {
		return nil, err
	}
	return b.launch("pgbouncer", b.o.proxyCPU, d, addr, false,
		"runuser", "-u", "postgres", "--", "pgbouncer", filepath.Join(d, "pgbouncer.ini"))
}

// startPgRelay runs this program's bare Postgres relay (-serve-pgrelay).
func (b *bench) startPgRelay(pg *pgtest.Server) (*running, error) {
	return b.launchSelf("pg relay", "pgrelay", b.o.proxyCPU, false, "-serve-pgrelay", "-relay-upstream", pg.Addr())
}
