package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"
)

// Keep-alive GET of 1 KiB: wrk direct and through egressd.

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
	defer os.Remove(script) //nolint:errcheck // a temporary file; a leftover is harmless
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
			go func() { errc <- profile(e, o.profile+"-http.pprof", o.duration-time.Second) }()
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
	// Direct and proxied run back to back in each round, so the verdicts
	// are medians of the rounds' own ratios and differences: a slow minute
	// of the shared machine weighs on both sides of a round alike.
	var ratios, adds []float64
	for i := range dRPS {
		ratios = append(ratios, pRPS[i]/dRPS[i])
		adds = append(adds, pP50[i]-dP50[i])
	}
	ratio := median(ratios)
	added := time.Duration(median(adds))
	fmt.Printf("keep-alive GET 1 KiB, %d conns, %v x %d rounds (medians):\n", o.conns, o.duration, o.rounds)
	fmt.Printf("  direct  %8.0f req/s\n  proxied %8.0f req/s  ratio %.2fx (median of rounds; target >= 0.50) %s\n",
		median(dRPS), median(pRPS), ratio, verdict(ratio >= 0.5))
	fmt.Printf("  p50 on 1 conn: direct %v, proxied %v, added %v (median of rounds; target <= 150µs) %s\n",
		time.Duration(median(dP50)), time.Duration(median(pP50)), added, verdict(added <= 150*time.Microsecond))
	cpu := time.Duration(median(cpuPerReq))
	fmt.Printf("  egressd CPU per proxied request %v (one core sustains ~%.0f req/s)\n", cpu, float64(time.Second)/float64(cpu))
	if o.baseline {
		return benchBaseline(o, script, median(dRPS))
	}
	return nil
}

// startGoproxy runs a bare goproxy (this binary with -serve-goproxy) pinned
// like egressd: what the library costs without identity, policy, pinned
// dialling or audit.
func startGoproxy(o options) (*egressd, error) {
	addr := fmt.Sprintf("127.0.0.1:%d", freePort())
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("taskset", "-c", o.proxyCPU, self, "-serve-goproxy", addr)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if i > 200 {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, errors.New("bare goproxy did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &egressd{cmd: cmd, proxy: addr}, nil
}

func (e *egressd) kill() {
	e.cmd.Process.Kill()
	e.cmd.Wait()
}

// benchBaseline runs the keep-alive wrk load through a bare goproxy.
func benchBaseline(o options, script string, direct float64) error {
	e, err := startGoproxy(o)
	if err != nil {
		return err
	}
	defer e.kill()
	var rps, cpu []float64
	for range o.rounds {
		c0 := e.cpuTime()
		r, _, err := wrk(o, o.conns, "http://"+e.proxy+"/", script)
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
	_, err = io.Copy(f, resp.Body)
	return errors.Join(err, f.Close())
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
		_, _ = w.Write(body) // the load generator may hang up mid-body
	}), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // serves until the process ends
	return ln.Addr().(*net.TCPAddr).Port, nil
}
