// Command bench measures egressd against the proxies users would run
// instead, in the same run, and writes BENCHMARKS.md (with a chart and the
// raw results as JSON) from what it measured:
//
//	go run ./e2e/bench -install   # installs the peers when missing, then the full run (< 15 min)
//	go run ./e2e/bench -quick     # smoke run: every workload once, briefly; measures nothing
//
// Peers: Squid (squid-openssl, also for ssl_bump), tinyproxy, smokescreen
// (Go module, pinned version), PgBouncer in session mode, and bare Go
// relays as ceilings. Each proxy is pinned to -proxy-cpu, the load
// generators, origins and PostgreSQL to -load-cpu; targets are interleaved
// within each round and medians reported. Every process the run starts is
// stopped on every exit path, signals included, and the run fails if one
// is left.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

type options struct {
	egressd   string
	proxyCPU  string
	loadCPU   string
	duration  time.Duration
	conns     int
	rounds    int
	repeat    int
	maxReqs   int64
	bulk      int64
	tunnels   int
	pgRounds  int
	pgSeconds int
	pgClients int
	pgScale   int
	only      string
	peers     string
	install   bool
	quick     bool
	out       string
	keep      bool
	timeout   time.Duration
	profile   string
}

// workloadIDs are the parts -only selects from, in run order.
var workloadIDs = []string{"get", "get-paced", "get-equal", "connect", "connect-tls", "https", "body", "leaf", "check", "pgbench", "idle", "get-unpinned"}

func main() {
	var o options
	flag.StringVar(&o.egressd, "egressd", "", "egressd binary (default: build ./cmd/egressd)")
	flag.StringVar(&o.proxyCPU, "proxy-cpu", "1", "CPU list every proxy is pinned to (taskset -c)")
	flag.StringVar(&o.loadCPU, "load-cpu", "0", "CPU list the load generators, origins, PostgreSQL and this program are pinned to")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "length of each HTTP load run")
	flag.IntVar(&o.conns, "conns", 32, "keep-alive connections of the HTTP loads")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds of the proxy workloads (every target once per round); medians are reported")
	flag.IntVar(&o.repeat, "repeat", 1, "run the chosen workloads this many times; the report gives each ratio's spread over the repeats, and a target is met only when every repeat meets it")
	flag.Int64Var(&o.maxReqs, "max-requests", 10_000_000, "bound on requests per connection of the Go load generator")
	flag.Int64Var(&o.bulk, "bulk", 1<<30, "bytes per CONNECT bulk transfer")
	flag.IntVar(&o.tunnels, "tunnels", 5000, "idle tunnels for the RSS measurement")
	flag.IntVar(&o.pgRounds, "pg-rounds", 5, "rounds of the pgbench workloads")
	flag.IntVar(&o.pgSeconds, "pg-seconds", 5, "length of each pgbench run (-T)")
	flag.IntVar(&o.pgClients, "pg-clients", 4, "pgbench clients (-c)")
	flag.IntVar(&o.pgScale, "pg-scale", 1, "pgbench scale (-i -s)")
	flag.StringVar(&o.only, "only", strings.Join(workloadIDs, ","), "comma-separated workloads to run")
	flag.StringVar(&o.peers, "peers", "egressd,squid,tinyproxy,smokescreen,relay", "comma-separated proxies for the get, connect and idle workloads")
	flag.BoolVar(&o.install, "install", false, "install missing Debian packages (apt-get) and smokescreen (go install) first")
	flag.BoolVar(&o.quick, "quick", false, "smoke run: 1 s loads, one round, small transfers; the report says it measures nothing")
	flag.StringVar(&o.out, "out", "BENCHMARKS.md", "report to write; the chart (.png) and raw results (.json) go beside it; empty: none")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory (configs and logs of every proxy)")
	flag.StringVar(&o.profile, "profile", "", "save egressd's CPU profile during its first round of each workload as PREFIX-WORKLOAD.pprof")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Minute, "per repeat: end the run (stopping every process) if it takes longer than this times -repeat")
	render := flag.String("render", "", "write the report (-out) and chart from a saved results JSON instead of measuring")
	relayFlags(flag.CommandLine)
	flag.Parse()
	if serve := relayCommand(); serve != nil {
		fmt.Fprintln(os.Stderr, "bench:", serve())
		os.Exit(1)
	}
	if *render != "" {
		if err := rerender(*render, o.out); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if o.quick {
		o = quickOptions(o)
	}
	cleanupOnSignal()
	// A whole run of every workload takes about 15 minutes here: a bound
	// for the whole run cut -repeat 2 short in its last workload.
	limit := o.timeout * time.Duration(max(o.repeat, 1))
	time.AfterFunc(limit, func() {
		stopRun(fmt.Sprintf("the run took longer than %v (-timeout %v per repeat)", limit, o.timeout), 1)
	})
	err := run(o, os.Args[1:])
	if cerr := cleanup(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// quickOptions is o shortened to a smoke run: every workload once, briefly.
func quickOptions(o options) options {
	o.quick = true
	o.duration, o.rounds, o.repeat, o.pgRounds, o.pgSeconds, o.pgClients, o.pgScale = time.Second, 1, 1, 1, 1, 2, 1
	o.bulk, o.tunnels, o.conns, o.maxReqs = 64<<20, 200, 8, 100_000
	return o
}

// bench is one run: its options, work directory, origin and results.
type bench struct {
	o           options
	work        string
	org         *origin
	egressd     string
	smokescreen string
	res         *Results
	started     time.Time
	// redirected is the transparent listener the transparent target's
	// nftables redirect sends to; "" before there is one.
	redirected string
	// repeat is the repeat being measured, from 0 (-repeat).
	repeat int
	// teardownMiB is each idle target's highest peak RSS through the
	// teardown of its tunnels (noteTeardown).
	teardownMiB map[string]float64
}

func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%5.0fs] %s\n", time.Since(b.started).Seconds(), fmt.Sprintf(format, args...))
}

func (b *bench) want(id string) bool { return listHas(b.o.only, id) }

func (b *bench) wantPeer(name string) bool { return listHas(b.o.peers, name) }

func listHas(list, x string) bool { return strings.Contains(","+list+",", ","+x+",") }

// validate refuses a workload or peer name the bench does not know: a
// typo would otherwise measure nothing and say nothing.
func validate(o options) error {
	if o.repeat < 1 {
		return fmt.Errorf("-repeat must be at least 1, got %d", o.repeat)
	}
	var peers []string
	for _, pp := range proxyPeers() {
		peers = append(peers, pp.name)
	}
	for _, c := range []struct {
		flag, list string
		known      []string
	}{{"-only", o.only, workloadIDs}, {"-peers", o.peers, peers}} {
		for _, x := range strings.Split(c.list, ",") {
			if x != "" && !slices.Contains(c.known, x) {
				return fmt.Errorf("%s: unknown %q; choose from %s", c.flag, x, strings.Join(c.known, ","))
			}
		}
	}
	return nil
}

func run(o options, args []string) error {
	if err := validate(o); err != nil {
		return err
	}
	b := &bench{o: o, started: time.Now(), res: &Results{
		Smoke: o.quick, Date: time.Now().UTC(), Versions: map[string]string{},
		Command: strings.TrimSpace("go run ./e2e/bench " + strings.Join(args, " ")),
	}}
	b.res.Machine = machine()
	if err := b.prepare(); err != nil {
		return err
	}
	b.res.Commit = commit()
	b.res.Versions = b.versions()
	measured := time.Now()
	org, err := startOrigin(b.work)
	if err != nil {
		return fmt.Errorf("origin: %w", err)
	}
	b.org = org
	b.res.Settings = b.settings()
	for i := range o.repeat {
		if o.repeat > 1 {
			b.progress("repeat %d of %d", i+1, o.repeat)
		}
		b.repeat = i
		wls, err := b.measure()
		if err != nil {
			return err
		}
		b.res.addRepeat(i, wls)
	}
	if o.repeat > 1 {
		b.res.Repeats = o.repeat
	}
	b.res.Machine.LoadAvg = loadAvg()
	b.res.Elapsed = time.Since(measured)
	b.progress("done")
	return b.write()
}

// pinSelf pins this program (origins, Go load generator) and every child
// not pinned otherwise (wrk, pgbench, PostgreSQL) to the load core.
func (b *bench) pinSelf() error {
	if b.o.loadCPU == "" {
		return nil
	}
	if err := exec.Command("taskset", "-a", "-p", "-c", b.o.loadCPU, strconv.Itoa(os.Getpid())).Run(); err != nil {
		return fmt.Errorf("taskset self: %w", err)
	}
	return nil
}

// measure runs the chosen workloads once.
func (b *bench) measure() ([]*Workload, error) {
	// Pinned again on every repeat: the unpinned workload unpins.
	if err := b.pinSelf(); err != nil {
		return nil, err
	}
	o := b.o
	var wls []*Workload
	if b.want("get") || b.want("get-paced") || b.want("get-equal") || b.want("connect") || b.want("connect-tls") {
		wls = append(wls, b.proxyWorkloads(o.proxyCPU, o.loadCPU, "")...)
	}
	if b.want("https") {
		wls = append(wls, b.httpsWorkload())
	}
	if b.want("body") {
		wls = append(wls, b.bodyWorkload())
	}
	if b.want("leaf") {
		wls = append(wls, b.leafWorkloads()...)
	}
	if b.want("check") {
		wls = append(wls, b.checkWorkloads()...)
	}
	if b.want("pgbench") {
		wls = append(wls, b.pgWorkloads()...)
	}
	if b.want("idle") {
		wls = append(wls, b.idleWorkload())
	}
	if b.want("get-unpinned") {
		if err := b.unpin(); err != nil {
			return nil, err
		}
		wls = append(wls, b.proxyWorkloads("", "", "unpinned")...)
	}
	return wls, nil
}

// unpin lets this program and its children use every CPU again.
func (b *bench) unpin() error {
	all := fmt.Sprintf("0-%d", b.res.Machine.NProc-1)
	if err := exec.Command("taskset", "-a", "-p", "-c", all, strconv.Itoa(os.Getpid())).Run(); err != nil {
		return fmt.Errorf("taskset self: %w", err)
	}
	return nil
}

// proxyWorkloads runs the keep-alive GET and CONNECT workloads through
// every selected proxy, started once and kept for all rounds; with an
// unpinned tag, only keep-alive GET, nothing pinned.
func (b *bench) proxyWorkloads(proxyCPUs, loadCPUs, tag string) []*Workload {
	get := &Workload{ID: "get", Title: "keep-alive GET 1 KiB", Unit: "req/s", CPUUnit: "ms per 1,000 requests", Latency: true,
		Note: fmt.Sprintf("wrk, %d connections, %v per run, policy and audit on in egressd; Squid with its access log on and caching off; tinyproxy at LogLevel Warning.", b.o.conns, b.o.duration)}
	paced := &Workload{ID: "get-paced", Title: "keep-alive GET 1 KiB, paced", Unit: "req/s", CPUUnit: "ms per 1,000 requests", Latency: true,
		Note: fmt.Sprintf("wrk, %d connections, each waiting %d ms between requests (at most %d req/s in all, below every proxy's capacity): latency at one load for every proxy.", b.o.conns, pacedDelayMS, b.o.conns*1000/pacedDelayMS)}
	equal := &Workload{ID: "get-equal", Title: "keep-alive GET 1 KiB, equal load", Unit: "req/s", CPUUnit: "ms per 1,000 requests", Latency: true,
		Note: fmt.Sprintf("Go generator, %d connections, %v per run, every proxy offered %.0f%% of the rate Squid reached in the keep-alive GET workload's rounds so far (same run, same repeat) on a fixed schedule; latency from each request's scheduled time, so a stall counts in full.", b.o.conns, b.o.duration, equalShare*100)}
	connect := &Workload{ID: "connect", Title: "CONNECT bulk, plain inside", Unit: "MiB/s", CPUUnit: "ms per GiB",
		Note: fmt.Sprintf("One tunnel, %d MiB per transfer.", b.o.bulk>>20)}
	connectTLS := &Workload{ID: "connect-tls", Title: "CONNECT bulk, TLS inside", Unit: "MiB/s", CPUUnit: "ms per GiB",
		Note: fmt.Sprintf("One tunnel, %d MiB per transfer inside TLS (egressd checks the SNI against the CONNECT host).", b.o.bulk>>20)}
	wls := []*Workload{get, paced, equal, connect, connectTLS}
	if tag != "" {
		get.ID, get.Title = "get-unpinned", get.Title+", unpinned"
		get.Note += " Nothing pinned: proxies, wrk and origin share every CPU."
		wls = []*Workload{get}
	} else {
		if !b.want("get") {
			wls = removeWorkload(wls, get)
		}
		if !b.want("get-paced") {
			wls = removeWorkload(wls, paced)
		}
		if !b.want("get-equal") {
			wls = removeWorkload(wls, equal)
		}
		if !b.want("connect") {
			wls = removeWorkload(wls, connect)
		}
		if !b.want("connect-tls") {
			wls = removeWorkload(wls, connectTLS)
		}
	}
	for _, wl := range wls {
		wl.target("direct", kindDirect)
	}
	var procs []*running
	for _, pp := range proxyPeers() {
		if !b.wantPeer(pp.name) {
			procs = append(procs, nil)
			continue
		}
		p, err := pp.start(b, proxyCPUs)
		if err != nil {
			for _, wl := range wls {
				wl.target(pp.name, pp.kind).fail("error: " + err.Error())
			}
		} else {
			defer p.stop()
		}
		procs = append(procs, p)
	}
	for round := range b.o.rounds {
		for _, wl := range wls {
			for i, pp := range append([]proxyPeer{{name: "direct", kind: kindDirect}}, proxyPeers()...) {
				var p *running
				if i > 0 {
					p = procs[i-1]
					if p == nil {
						continue
					}
				}
				t := wl.target(pp.name, pp.kind)
				var prof *running
				if pp.kind == kindEgressd {
					prof = p
				}
				// egressd's SOCKS5 and transparent arrivals run beside its
				// CONNECT: before it in odd rounds, after it in even ones, so
				// no arrival gains from its place in the round.
				arrivals := pp.name == "egressd" && (wl == connect || wl == connectTLS)
				if arrivals && round%2 == 1 {
					b.arrivalRounds(wl, p, wl == connectTLS)
				}
				switch wl {
				case get:
					b.withProfile(prof, wl.ID, round, b.o.duration-time.Second, func() { b.getRound(t, p, loadCPUs, 0) })
				case paced:
					b.withProfile(prof, wl.ID, round, b.o.duration-time.Second, func() { b.getRound(t, p, loadCPUs, pacedDelayMS) })
				case equal:
					b.withProfile(prof, wl.ID, round, b.o.duration-time.Second, func() { b.equalRound(t, p, equalRate(get)) })
				case connect:
					b.withProfile(prof, wl.ID, round, time.Second, func() { b.bulkRound(t, p, false, "") })
				case connectTLS:
					b.withProfile(prof, wl.ID, round, time.Second, func() { b.bulkRound(t, p, true, "") })
				}
				if arrivals && round%2 == 0 {
					b.arrivalRounds(wl, p, wl == connectTLS)
				}
			}
		}
	}
	return wls
}

func removeWorkload(wls []*Workload, w *Workload) []*Workload {
	var out []*Workload
	for _, x := range wls {
		if x != w {
			out = append(out, x)
		}
	}
	return out
}

// prepare checks (or installs) what the selected workloads need, makes the
// work directory and builds egressd.
func (b *bench) prepare() error {
	if err := b.requirements(); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "egressd-bench-")
	if err != nil {
		return err
	}
	if err := os.Chmod(work, 0o755); err != nil {
		return err
	}
	b.work = work
	if b.o.keep {
		fmt.Fprintln(os.Stderr, "bench: work directory", work)
	} else {
		atExit(func() { os.RemoveAll(work) }) //nolint:errcheck // a temporary directory; a leftover is harmless
	}
	b.egressd = b.o.egressd
	if b.egressd == "" && b.needsEgressd() {
		b.egressd = filepath.Join(work, "egressd")
		// The shipped build (the Dockerfile's): the bench measures
		// the binary as it ships.
		cmd := exec.Command("bash", "deploy/build.sh", b.egressd)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build egressd (run from the repository root): %w", err)
		}
	}
	return nil
}

func (b *bench) needsEgressd() bool {
	proxied := b.want("get") || b.want("get-paced") || b.want("get-equal") || b.want("connect") || b.want("connect-tls") || b.want("idle") || b.want("get-unpinned")
	return proxied && b.wantPeer("egressd") || b.want("https") || b.want("body") || b.want("check") || b.want("pgbench")
}
