package pggate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/internal/pgtest"
	"github.com/egressd/egressd/policy"
)

// benchQuery is a typical 200-byte application query.
const benchQuery = "SELECT u.id, u.name, lower(u.name) AS lname, count(i.id) AS n FROM users u LEFT JOIN items i ON i.id = u.id " +
	"WHERE u.id > 10 AND u.name LIKE 'a%' GROUP BY u.id, u.name ORDER BY n DESC LIMIT 50"

func benchSession(b *testing.B, cacheSize int) *session {
	g := fuzzGate(b)
	g.cfg.CacheSize = cacheSize
	g.verdicts = newVerdictCache(cacheSize)
	g.deps.Audit = audittest.Sink{}
	id := policy.Identity{ID: "agent-ro", Attributes: map[string]string{"sql_profile": "read_only"}}
	return &session{g: g, identity: id, database: "app", remote: "bench", keyPrefix: cacheKeyPrefix(id, "app")}
}

// BenchmarkDecide measures parse + decide + audit-record building for one
// query: cold (every cache off, the gate's and the engine's, so every
// call pre-scans, keys, parses with pg_query and evaluates
// rego/sql.rego), uncached (the gate's caches off, the engine's
// facts-keyed cache warm) and cached (exact-text hit).
func BenchmarkDecide(b *testing.B) {
	if len(benchQuery) < 190 || len(benchQuery) > 210 {
		b.Fatalf("benchQuery is %d bytes; want ~200", len(benchQuery))
	}
	b.Run("cold", func(b *testing.B) {
		e, err := newTestEngine(-1)
		if err != nil {
			b.Fatal(err)
		}
		s := benchSession(b, -1)
		s.g.cur.Store(&current{engine: e, ids: s.g.cur.Load().ids})
		benchDecideQuery(b, s)
	})
	for _, bc := range []struct {
		name  string
		cache int
	}{{"uncached", -1}, {"cached", 10000}} {
		b.Run(bc.name, func(b *testing.B) {
			benchDecideQuery(b, benchSession(b, bc.cache))
		})
	}
	// New literals in a known shape (pgbench's pattern): the exact-text
	// cache misses, the normalized one (sqlparse.Key) hits, so pg_query
	// only scans.
	b.Run("new-literals", func(b *testing.B) {
		s := benchSession(b, 10000)
		s.decide(benchQuery)
		b.ReportAllocs()
		b.ResetTimer()
		i := 0
		for b.Loop() {
			// Every text is new: the exact-text cache never hits.
			s.decide(strings.Replace(benchQuery, "10", strconv.Itoa(1000+i), 1))
			i++
		}
	})
	// New integers only (pgbench -S): the shape cache hits, so no cgo.
	b.Run("new-integers", func(b *testing.B) {
		s := benchSession(b, 10000)
		s.decide("SELECT abalance FROM pgbench_accounts WHERE aid = 1;")
		b.ReportAllocs()
		b.ResetTimer()
		i := 0
		for b.Loop() {
			s.decide("SELECT abalance FROM pgbench_accounts WHERE aid = " + strconv.Itoa(1000+i) + ";")
			i++
		}
	})
}

var (
	tpsRE  = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
	txnsRE = regexp.MustCompile(`number of transactions actually processed: ([0-9]+)`)
)

// cpuTimes is the user+system CPU time this process and its waited-for
// children have used: on a shared machine, CPU per transaction is steadier
// than a rate.
func cpuTimes(b *testing.B) (self, children time.Duration) {
	var s, c syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &s); err != nil {
		b.Fatal(err)
	}
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &c); err != nil {
		b.Fatal(err)
	}
	return time.Duration(s.Utime.Nano() + s.Stime.Nano()), time.Duration(c.Utime.Nano() + c.Stime.Nano())
}

// BenchmarkPgbench runs pgbench against PostgreSQL directly and through
// the gate in the same run and reports both rates and their ratio:
// select-only (-S, read_only identity) in the simple and the extended
// protocol (-M extended) and the default TPC-B-like script
// (read_write identity). -n: the gate denies VACUUM, so tables are
// vacuumed directly beforehand. Set PGBENCH_SECONDS to change the length
// of each run (default 10).
func BenchmarkPgbench(b *testing.B) {
	pg := sharedPG(b)
	secs := os.Getenv("PGBENCH_SECONDS")
	if secs == "" {
		secs = "10"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := pg.Exec(ctx, "postgres", "DROP DATABASE IF EXISTS bench"); err != nil {
		b.Fatal(err)
	}
	if err := pg.Exec(ctx, "postgres", "CREATE DATABASE bench"); err != nil {
		b.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(pg.Addr())
	initCmd := exec.Command(pg.Bin("pgbench"), "-i", "-q", "-s", "1", "-h", host, "-p", port, "-U", pgtest.SuperUser, "bench")
	initCmd.Env = append(os.Environ(), "PGPASSWORD="+pgtest.SuperPassword)
	if out, err := initCmd.CombinedOutput(); err != nil {
		b.Fatalf("pgbench -i: %v\n%s", err, out)
	}
	f := startGate(b, pg, nil)
	f.gate.deps.Audit = audittest.Sink{}
	ghost, gport, _ := net.SplitHostPort(f.addr)
	// run returns pgbench's rate, the CPU this process (the gate; idle
	// during a direct run) spent per transaction, pgbench's own CPU per
	// transaction for scale, and this process's heap allocations per
	// transaction (steadier than CPU on a shared machine).
	run := func(h, p, user, pass string, extra ...string) (tps, cpuPerTxn, clientPerTxn, allocsPerTxn float64) {
		if err := pg.Exec(ctx, "bench", "VACUUM ANALYZE"); err != nil {
			b.Fatal(err)
		}
		args := append([]string{"-n", "-c", "4", "-j", "2", "-T", secs, "-h", h, "-p", p, "-U", user}, extra...)
		cmd := exec.Command(pg.Bin("pgbench"), append(args, "bench")...)
		cmd.Env = append(os.Environ(), "PGPASSWORD="+pass, "PGSSLMODE=disable")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		cpu0, child0 := cpuTimes(b)
		if err := cmd.Run(); err != nil {
			b.Fatalf("pgbench %v: %v\n%s", args, err, out.String())
		}
		cpu1, child1 := cpuTimes(b)
		runtime.ReadMemStats(&m1)
		m, n := tpsRE.FindStringSubmatch(out.String()), txnsRE.FindStringSubmatch(out.String())
		if m == nil || n == nil {
			b.Fatalf("no tps in pgbench output:\n%s", out.String())
		}
		tps, _ = strconv.ParseFloat(m[1], 64)
		txns, _ := strconv.ParseFloat(n[1], 64)
		txns = max(txns, 1)
		return tps, float64((cpu1 - cpu0).Microseconds()) / txns, float64((child1 - child0).Microseconds()) / txns,
			float64(m1.Mallocs-m0.Mallocs) / txns
	}
	for _, bc := range []struct {
		name, user, pass string
		extra            []string
	}{
		{"select-only", "agent-ro", passRO, []string{"-S"}},
		{"extended", "agent-ro", passRO, []string{"-S", "-M", "extended"}},
		{"tpcb", "agent-rw", passRW, nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				direct, _, _, _ := run(host, port, pgtest.SuperUser, pgtest.SuperPassword, bc.extra...)
				gate, cpu, client, allocs := run(ghost, gport, bc.user, bc.pass, bc.extra...)
				b.ReportMetric(direct, "direct_tps")
				b.ReportMetric(gate, "gate_tps")
				b.ReportMetric(gate/direct, "ratio")
				b.ReportMetric(cpu, "gate_cpu_us/txn")
				b.ReportMetric(client, "pgbench_cpu_us/txn")
				b.ReportMetric(allocs, "gate_allocs/txn")
				fmt.Fprintf(os.Stderr, "pgbench %s: direct %.0f tps, gate %.0f tps, ratio %.2f, CPU per txn: gate %.1f µs, pgbench %.1f µs; gate allocs per txn %.1f\n",
					bc.name, direct, gate, gate/direct, cpu, client, allocs)
			}
		})
	}
}

// benchDecideQuery decides benchQuery on s once per iteration, after
// checking that it is allowed.
func benchDecideQuery(b *testing.B, s *session) {
	if v := s.decide(benchQuery); !v.allow {
		b.Fatalf("benchQuery denied: %s", v.reason)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		s.decide(benchQuery)
	}
}

// BenchmarkSessionExchanges runs one session's whole loop (read, decide,
// forward, relay back) on in-memory pipes against the stub upstream: the
// simple protocol, and the extended one as pgbench -M extended sends it
// (unnamed Parse, Bind, Describe, Execute, Sync). Each iteration pipelines
// per exchanges and reads their answers up to the last ReadyForQuery.
func BenchmarkSessionExchanges(b *testing.B) {
	const per = 100
	for _, bc := range []struct {
		name string
		msgs []pgproto3.FrontendMessage
	}{
		{"simple", []pgproto3.FrontendMessage{&pgproto3.Query{String: benchQuery}}},
		{"extended", []pgproto3.FrontendMessage{&pgproto3.Parse{Query: benchQuery}, &pgproto3.Bind{},
			&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			g, rec := auditedFuzzGate(b)
			client, s, wait := pipeSession(b, g)
			go s.run()
			var data []byte
			for range per {
				data = append(data, encode(bc.msgs...)...)
			}
			r := bufio.NewReaderSize(client, 32<<10)
			exchange := func() {
				go client.Write(data)
				for ready := 0; ready < per; {
					hdr, err := r.Peek(5)
					if err != nil {
						b.Fatal(err)
					}
					if hdr[0] == 'E' {
						b.Fatalf("an exchange failed: %s", audittest.Summary(rec.Since(0)))
					}
					if hdr[0] == 'Z' {
						ready++
					}
					if _, err := r.Discard(1 + int(binary.BigEndian.Uint32(hdr[1:]))); err != nil {
						b.Fatal(err)
					}
				}
			}
			exchange()
			g.deps.Audit = audittest.Sink{}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				exchange()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*per), "ns/exchange")
			b.StopTimer()
			client.Close()
			wait()
		})
	}
}
