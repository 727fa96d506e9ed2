// Command bench measures egressd against a direct connection on loopback, in
// the same run: keep-alive GETs of 1 KiB (wrk), CONNECT bulk throughput, and
// peak RSS with thousands of idle tunnels. egressd runs pinned to one core
// (-proxy-cpu), the load generator and upstreams to another (-load-cpu),
// with policy and audit on.
//
//	go run ./e2e/bench                  # builds egressd, prints the figures
//	go run ./e2e/bench -profile cpu.out # also takes a CPU profile of egressd
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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
	"sync"
	"time"

	"github.com/elazarl/goproxy"

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
	flag.StringVar(&o.profile, "profile", "", "write a CPU profile of egressd during a proxied wrk run")
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
		defer os.RemoveAll(work)
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

func freePort() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
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

// ---- keep-alive GET 1 KiB ----

var (
	reqsRe = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	p50Re  = regexp.MustCompile(`\s50%\s+([\d.]+)(us|ms|s)`)
	errRe  = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)|Socket errors: .*`)
)

type wrkResult struct {
	rps float64
	p50 time.Duration
}

func wrk(o options, conns int, target, script string, extra ...string) (wrkResult, string, error) {
	args := []string{"-c", o.loadCPU, "wrk", "-t1", "-c" + strconv.Itoa(conns), "-d" + o.duration.String(), "--latency"}
	if script != "" {
		args = append(args, "-s", script)
	}
	args = append(args, extra...)
	args = append(args, target)
	out, err := exec.Command("taskset", args...).CombinedOutput()
	if err != nil {
		return wrkResult{}, string(out), fmt.Errorf("wrk: %w\n%s", err, out)
	}
	var r wrkResult
	if m := reqsRe.FindSubmatch(out); m != nil {
		r.rps, _ = strconv.ParseFloat(string(m[1]), 64)
	}
	if m := p50Re.FindSubmatch(out); m != nil {
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		unit := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second}[string(m[2])]
		r.p50 = time.Duration(v * float64(unit))
	}
	if m := errRe.Find(out); m != nil {
		return r, string(out), fmt.Errorf("wrk reported errors: %s\n%s", m, out)
	}
	return r, string(out), nil
}

func benchHTTP(o options, e *egressd, port int) error {
	direct := fmt.Sprintf("http://127.0.0.1:%d/bytes/1024", port)
	script := filepath.Join(os.TempDir(), fmt.Sprintf("egressd-bench-%d.lua", os.Getpid()))
	lua := fmt.Sprintf("wrk.path = %q\nwrk.headers[\"Host\"] = \"127.0.0.1:%d\"\n", direct, port)
	if err := os.WriteFile(script, []byte(lua), 0o644); err != nil {
		return err
	}
	defer os.Remove(script)
	proxied := "http://" + e.proxy + "/"

	// Warm both paths (connections, decision cache).
	if _, _, err := wrk(options{loadCPU: o.loadCPU, duration: time.Second}, 4, proxied, script); err != nil {
		return err
	}
	var dRPS, pRPS, dP50, pP50, cpuPerReq []float64
	for i := range o.rounds {
		d, _, err := wrk(o, o.conns, direct, "")
		if err != nil {
			return err
		}
		var p wrkResult
		cpu0 := e.cpuTime()
		if o.profile != "" && i == 0 {
			errc := make(chan error, 1)
			go func() { errc <- profile(e, o.profile, o.duration-time.Second) }()
			p, _, err = wrk(o, o.conns, proxied, script)
			if perr := <-errc; perr != nil {
				return perr
			}
		} else {
			p, _, err = wrk(o, o.conns, proxied, script)
		}
		if err != nil {
			return err
		}
		cpuPerReq = append(cpuPerReq, float64(e.cpuTime()-cpu0)/(p.rps*o.duration.Seconds()))
		dRPS, pRPS = append(dRPS, d.rps), append(pRPS, p.rps)
		// Latency on one connection: no queueing, so p50 is the path's cost.
		d1, _, err := wrk(o, 1, direct, "")
		if err != nil {
			return err
		}
		p1, _, err := wrk(o, 1, proxied, script)
		if err != nil {
			return err
		}
		dP50, pP50 = append(dP50, float64(d1.p50)), append(pP50, float64(p1.p50))
		fmt.Printf("  round %d: direct %.0f req/s, proxied %.0f req/s (%.2fx); p50 on 1 conn direct %v, proxied %v\n",
			i+1, d.rps, p.rps, p.rps/d.rps, d1.p50, p1.p50)
	}
	ratio := median(pRPS) / median(dRPS)
	added := time.Duration(median(pP50) - median(dP50))
	fmt.Printf("keep-alive GET 1 KiB, %d conns, %v x %d rounds (medians):\n", o.conns, o.duration, o.rounds)
	fmt.Printf("  direct  %8.0f req/s\n  proxied %8.0f req/s  ratio %.2fx (target >= 0.50) %s\n",
		median(dRPS), median(pRPS), ratio, verdict(ratio >= 0.5))
	fmt.Printf("  p50 on 1 conn: direct %v, proxied %v, added %v (target <= 150µs) %s\n",
		time.Duration(median(dP50)), time.Duration(median(pP50)), added, verdict(added <= 150*time.Microsecond))
	cpu := time.Duration(median(cpuPerReq))
	fmt.Printf("  egressd CPU per proxied request %v (one core sustains ~%.0f req/s)\n", cpu, float64(time.Second)/float64(cpu))
	if o.baseline {
		return benchBaseline(o, script, median(dRPS))
	}
	return nil
}

// benchBaseline runs a bare goproxy (this binary with -serve-goproxy) pinned
// like egressd, for the same wrk run: what the library costs without
// identity, policy, pinned dialling or audit.
func benchBaseline(o options, script string, direct float64) error {
	addr := fmt.Sprintf("127.0.0.1:%d", freePort())
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command("taskset", "-c", o.proxyCPU, self, "-serve-goproxy", addr)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if i > 200 {
			return errors.New("bare goproxy did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	e := &egressd{cmd: cmd}
	var rps, cpu []float64
	for range o.rounds {
		c0 := e.cpuTime()
		r, _, err := wrk(o, o.conns, "http://"+addr+"/", script)
		if err != nil {
			return err
		}
		rps = append(rps, r.rps)
		cpu = append(cpu, float64(e.cpuTime()-c0)/(r.rps*o.duration.Seconds()))
	}
	fmt.Printf("  bare goproxy (same core, no policy/audit): %.0f req/s (%.2fx direct), CPU per request %v\n",
		median(rps), median(rps)/direct, time.Duration(median(cpu)))
	return nil
}

func profile(e *egressd, file string, d time.Duration) error {
	time.Sleep(500 * time.Millisecond)
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", e.admin, max(1, int(d.Seconds()))))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// startHTTPUpstream serves 1 KiB bodies with keep-alive.
func startHTTPUpstream() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	body := bytes.Repeat([]byte("x"), 1024)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1024")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(body)
	}), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// ---- CONNECT bulk throughput ----

// startSink accepts connections, reads everything, then answers one byte
// so the sender knows the transfer is complete.
func startSink() (int, error) {
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
				buf := make([]byte, 256<<10)
				for {
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
				c.Write([]byte{1})
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func sendBulk(c net.Conn, n int64) (time.Duration, error) {
	buf := bytes.Repeat([]byte{0xab}, 256<<10)
	start := time.Now()
	for sent := int64(0); sent < n; {
		m := min(int64(len(buf)), n-sent)
		w, err := c.Write(buf[:m])
		sent += int64(w)
		if err != nil {
			return 0, err
		}
	}
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		return 0, fmt.Errorf("await sink: %w", err)
	}
	return time.Since(start), nil
}

func dialTunnel(proxy, target string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", proxy, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	// Read the response head byte by byte so no tunnel byte is consumed.
	var head []byte
	b := make([]byte, 1)
	for !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		if _, err := c.Read(b); err != nil {
			c.Close()
			return nil, fmt.Errorf("CONNECT %s: %w", target, err)
		}
		head = append(head, b[0])
		if len(head) > 4096 {
			c.Close()
			return nil, errors.New("CONNECT response too long")
		}
	}
	if !bytes.HasPrefix(head, []byte("HTTP/1.1 200")) {
		c.Close()
		return nil, fmt.Errorf("CONNECT %s: %q", target, head)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

func benchConnect(o options, e *egressd, port int) error {
	target := fmt.Sprintf("127.0.0.1:%d", port)
	var direct, proxied []float64
	for range o.rounds {
		c, err := net.Dial("tcp", target)
		if err != nil {
			return err
		}
		d, err := sendBulk(c, o.bulk)
		c.Close()
		if err != nil {
			return err
		}
		t, err := dialTunnel(e.proxy, target)
		if err != nil {
			return err
		}
		p, err := sendBulk(t, o.bulk)
		t.Close()
		if err != nil {
			return err
		}
		direct = append(direct, float64(o.bulk)/d.Seconds())
		proxied = append(proxied, float64(o.bulk)/p.Seconds())
	}
	ratio := median(proxied) / median(direct)
	fmt.Printf("CONNECT bulk, %d MiB x %d rounds (medians):\n  direct  %7.0f MiB/s\n  proxied %7.0f MiB/s  ratio %.2fx (target >= 0.90) %s\n",
		o.bulk>>20, o.rounds, median(direct)/(1<<20), median(proxied)/(1<<20), ratio, verdict(ratio >= 0.9))
	return nil
}

// ---- idle tunnels ----

// startHolder accepts connections and keeps them open without a byte.
func startHolder() (int, error) {
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
				io.Copy(io.Discard, c)
				c.Close()
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func benchIdle(o options, e *egressd, port int) error {
	before, _ := e.status("VmRSS")
	target := fmt.Sprintf("127.0.0.1:%d", port)
	conns := make([]net.Conn, o.tunnels)
	var mu sync.Mutex
	var firstErr error
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for i := range conns {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if ctx.Err() != nil {
				return
			}
			c, err := dialTunnel(e.proxy, target)
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				cancel()
				return
			}
			conns[i] = c
		})
	}
	wg.Wait()
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	if firstErr != nil {
		return fmt.Errorf("open tunnels: %w", firstErr)
	}
	time.Sleep(2 * time.Second)
	rss, err := e.status("VmRSS")
	if err != nil {
		return err
	}
	hwm, err := e.status("VmHWM")
	if err != nil {
		return err
	}
	fmt.Printf("idle tunnels: %d open; egressd RSS %d MiB (before %d MiB), peak RSS %d MiB (target <= 200) %s\n",
		o.tunnels, rss>>10, before>>10, hwm>>10, verdict(hwm>>10 <= 200))
	return nil
}
