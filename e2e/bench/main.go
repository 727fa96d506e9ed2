// Command bench measures egressd against a direct connection on loopback, in
// the same run: keep-alive GETs of 1 KiB (wrk), CONNECT bulk throughput, and
// peak RSS with thousands of idle tunnels. egressd runs pinned to one core
// (-proxy-cpu), the load generator and upstreams to another (-load-cpu),
// with policy and audit on.
//
//	go run ./e2e/bench                  # builds egressd, prints the figures
//	go run ./e2e/bench -profile cpu     # also writes cpu-http.pprof, cpu-connect.pprof
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/egressd/egressd/proxy/pggate/pgtest"
	"github.com/egressd/egressd/rego"
)

type options struct {
	egressd  string
	proxyCPU string
	loadCPU  string
	duration time.Duration
	conns    int
	rounds   int
	bulk     int64
	tunnels  int
	profile  string
	keep     bool
	only     string
	baseline bool
}

func main() {
	var o options
	flag.StringVar(&o.egressd, "egressd", "", "egressd binary (default: build ./cmd/egressd)")
	flag.StringVar(&o.proxyCPU, "proxy-cpu", "1", "CPU list egressd is pinned to (taskset -c)")
	flag.StringVar(&o.loadCPU, "load-cpu", "0", "CPU list wrk, the upstreams and this program are pinned to")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "length of each wrk run")
	flag.IntVar(&o.conns, "conns", 32, "wrk connections for the throughput runs")
	flag.IntVar(&o.rounds, "rounds", 3, "alternating direct/proxied rounds; medians are reported")
	flag.Int64Var(&o.bulk, "bulk", 2<<30, "bytes per CONNECT bulk transfer")
	flag.IntVar(&o.tunnels, "tunnels", 5000, "idle tunnels for the RSS measurement")
	flag.StringVar(&o.profile, "profile", "", "write CPU profiles of egressd, PREFIX-http.pprof and PREFIX-connect.pprof, during the first proxied round")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory")
	flag.StringVar(&o.only, "only", "http,connect,idle", "comma-separated parts to run")
	flag.BoolVar(&o.baseline, "baseline", true, "also measure a bare goproxy (no policy, audit, identity) on the same core")
	serveGoproxy := flag.String("serve-goproxy", "", "internal: run a bare goproxy on this address")
	flag.Parse()
	if *serveGoproxy != "" {
		gp := goproxy.NewProxyHttpServer()
		gp.Tr = &http.Transport{MaxIdleConnsPerHost: 64}
		fmt.Fprintln(os.Stderr, http.ListenAndServe(*serveGoproxy, gp))
		os.Exit(1)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if _, err := exec.LookPath("wrk"); err != nil {
		return errors.New("wrk not found (apt-get install wrk)")
	}
	// Pin this process (upstreams, CONNECT clients) next to wrk.
	if err := exec.Command("taskset", "-a", "-p", "-c", o.loadCPU, strconv.Itoa(os.Getpid())).Run(); err != nil {
		return fmt.Errorf("taskset self: %w", err)
	}
	work, err := os.MkdirTemp("", "egressd-bench-")
	if err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(work) //nolint:errcheck // a temporary directory; a leftover is harmless
	}
	if o.egressd == "" {
		o.egressd = filepath.Join(work, "egressd")
		cmd := exec.Command("go", "build", "-o", o.egressd, "./cmd/egressd")
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build egressd: %w", err)
		}
	}

	httpUp, err := startHTTPUpstream()
	if err != nil {
		return err
	}
	sink, err := startSink()
	if err != nil {
		return err
	}
	holder, err := startHolder()
	if err != nil {
		return err
	}
	e, err := startEgressd(o, work, []int{httpUp, sink, holder})
	if err != nil {
		return err
	}
	defer e.stop()

	fmt.Printf("egressd pinned to CPU %s; wrk, upstreams and clients to CPU %s; GOMAXPROCS(bench)=%d\n",
		o.proxyCPU, o.loadCPU, runtime.GOMAXPROCS(0))
	parts := []struct {
		name string
		run  func() error
	}{
		{"http", func() error { return benchHTTP(o, e, httpUp) }},
		{"connect", func() error { return benchConnect(o, e, sink) }},
		{"idle", func() error { return benchIdle(o, e, holder) }},
	}
	for _, p := range parts {
		if !strings.Contains(","+o.only+",", ","+p.name+",") {
			continue
		}
		if err := p.run(); err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("load average during the run: %s", load)
	return nil
}

// egressd is the process under test.
type egressd struct {
	cmd   *exec.Cmd
	proxy string
	admin string
	audit string
}

// serveTCP accepts loopback connections until the program ends, running
// handle on each and closing the connection after it; it returns the port.
func serveTCP(handle func(net.Conn)) (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func freePort() int {
	port, err := pgtest.FreePort()
	if err != nil {
		panic(err)
	}
	return port
}

func startEgressd(o options, work string, ports []int) (*egressd, error) {
	pol := filepath.Join(work, "policy")
	if err := rego.Write(pol, false); err != nil {
		return nil, err
	}
	var ps []string
	for _, p := range ports {
		ps = append(ps, strconv.Itoa(p))
	}
	data := fmt.Sprintf(`{"rules":[{"id":"bench","hosts":["127.0.0.1"],"ports":[%s],"tls":false}]}`, strings.Join(ps, ","))
	if err := os.WriteFile(filepath.Join(pol, "data.json"), []byte(data), 0o644); err != nil {
		return nil, err
	}
	e := &egressd{
		proxy: fmt.Sprintf("127.0.0.1:%d", freePort()),
		admin: fmt.Sprintf("127.0.0.1:%d", freePort()),
		audit: filepath.Join(work, "audit"),
	}
	cfg := fmt.Sprintf(`log: {level: warn}
proxy:
  listen: %s
  max_conns: 20000
  per_identity_max_conns: 20000
  per_identity_rate: 1000000
  per_identity_burst: 1000000
admin: {listen: %s}
audit: {dir: %s}
dns: {upstreams: ["127.0.0.1:1"]}
policy: {dir: %s}
internal:
  - cidr: 127.0.0.1
    ports: [%s]
    action: allow
`, e.proxy, e.admin, e.audit, pol, strings.Join(ps, ", "))
	cfgPath := filepath.Join(work, "egressd.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	e.cmd = exec.Command("taskset", "-c", o.proxyCPU, o.egressd, "serve", "--config", cfgPath)
	e.cmd.Stderr = os.Stderr
	if err := e.cmd.Start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + e.admin + "/healthz")
		if err == nil {
			resp.Body.Close()
			return e, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.stop()
	return nil, errors.New("egressd did not come up")
}

func (e *egressd) stop() {
	e.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { e.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		e.cmd.Process.Kill()
		<-done
	}
}

// status reads a field (kB) of /proc/PID/status.
func (e *egressd) status(field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", e.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	m := regexp.MustCompile(field + `:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		return 0, fmt.Errorf("no %s in status", field)
	}
	return strconv.ParseInt(string(m[1]), 10, 64)
}

// cpuTime is the process's user+system CPU time so far.
func (e *egressd) cpuTime() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", e.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may contain spaces).
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// cpuTimes is busy and total jiffies per CPU, from /proc/stat.
type cpuTimes struct{ busy, total []int64 }

func readCPUTimes() cpuTimes {
	var t cpuTimes
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return t
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 8 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		var all, idle int64
		for i, x := range f[1:] {
			v, _ := strconv.ParseInt(x, 10, 64)
			all += v
			if i == 3 || i == 4 { // idle, iowait
				idle += v
			}
		}
		t.busy, t.total = append(t.busy, all-idle), append(t.total, all)
	}
	return t
}

// busySince is each CPU's busy fraction between before and t.
func (t cpuTimes) busySince(before cpuTimes) []float64 {
	var out []float64
	for i := range min(len(t.total), len(before.total)) {
		if d := t.total[i] - before.total[i]; d > 0 {
			out = append(out, float64(t.busy[i]-before.busy[i])/float64(d))
		} else {
			out = append(out, 0)
		}
	}
	return out
}

// medianBusy formats the per-CPU median of several busySince results.
func medianBusy(runs [][]float64) string {
	if len(runs) == 0 {
		return "n/a"
	}
	var parts []string
	for cpu := range runs[0] {
		var xs []float64
		for _, r := range runs {
			if cpu < len(r) {
				xs = append(xs, r[cpu])
			}
		}
		parts = append(parts, fmt.Sprintf("cpu%d %.0f%%", cpu, 100*median(xs)))
	}
	return strings.Join(parts, ", ")
}
