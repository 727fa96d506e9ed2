package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testwait"
)

// asMainEnv makes the test binary run the bench's main (with the
// arguments after "--"), so a test can interrupt a whole run.
const asMainEnv = "EGRESSD_BENCH_AS_MAIN"

func TestMain(m *testing.M) {
	// The relays are started as this binary with relay flags (startRelay
	// runs os.Executable()), the interrupted run with asMainEnv.
	if len(os.Args) > 1 && strings.HasPrefix(os.Args[1], "-serve-") {
		fs := flag.NewFlagSet("relay", flag.ExitOnError)
		relayFlags(fs)
		fs.Parse(os.Args[1:]) //nolint:errcheck // ContinueOnError is not set: a bad flag exits
		fmt.Fprintln(os.Stderr, relayCommand()())
		os.Exit(1)
	}
	if os.Getenv(asMainEnv) != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// sample is a run with every kind of row: figures, a missing peer, an
// unsupported target, a lower-is-better workload.
func sample() *Results {
	lat := func(p99 float64) []float64 { return []float64{1, 1.5, 2, 3, p99, p99 * 2} }
	return &Results{
		Smoke: true, Commit: "abc123", Date: time.Date(2026, 12, 1, 18, 0, 0, 0, time.UTC),
		Command: "go run ./e2e/bench -quick", Elapsed: 11*time.Minute + 30*time.Second,
		Machine:  Machine{NProc: 2, CPU: "Test CPU", Kernel: "6.1", LoadAvg: "1.0 1.0 1.0"},
		Versions: map[string]string{"squid": "Squid Cache: Version 5.7", "go": "go1.26"},
		Settings: []string{"each proxy pinned to CPU 1"},
		Commands: map[string]string{"squid": "taskset -c 1 squid -N -f $DIR/squid.conf"},
		Workloads: []*Workload{
			{ID: "get", Title: "keep-alive GET 1 KiB", Unit: "req/s", CPUUnit: "ms per 1,000 requests", Latency: true,
				Targets: []*Target{
					{Name: "direct", Kind: kindDirect, Rounds: []Round{{Rate: 40000, LatencyMS: lat(1)}}},
					{Name: "egressd", Kind: kindEgressd, Rounds: []Round{
						{Rate: 12000, CPU: 50, LatencyMS: lat(17)}, {Rate: 12459, CPU: 55.7, LatencyMS: lat(17.6)}, {Rate: 13000, CPU: 60, LatencyMS: lat(18)}}},
					{Name: "squid", Kind: kindPeer, Rounds: []Round{{Rate: 10365, CPU: 87.8, LatencyMS: lat(9.7)}}},
					{Name: "tinyproxy", Kind: kindPeer, Rounds: []Round{{Rate: 5000, CPU: 100, LatencyMS: lat(30)}},
						Note: "wrk: Socket errors: read 5 (the proxy closes connections: wrk reconnects)"},
					{Name: "smokescreen", Kind: kindPeer, Status: "error: wrk: Non-2xx or 3xx responses: 3"},
					{Name: "relay", Kind: kindCeiling, Rounds: []Round{{Rate: 20000, CPU: 30, LatencyMS: lat(5)}}},
				}},
			{ID: "connect", Title: "CONNECT bulk, plain inside", Unit: "MiB/s", CPUUnit: "ms per GiB",
				Targets: []*Target{
					{Name: "egressd", Kind: kindEgressd, Rounds: []Round{{Rate: 1509, CPU: 300}}},
					{Name: "squid", Kind: kindPeer, Rounds: []Round{{Rate: 1166, CPU: 500}}},
					{Name: "relay", Kind: kindCeiling, Rounds: []Round{{Rate: 1600, CPU: 250}}},
				}},
			{ID: "https", Title: "keep-alive GET 1 KiB over TLS", Unit: "req/s", CPUUnit: "ms per 1,000 requests", Latency: true,
				Targets: []*Target{
					{Name: "direct TLS", Kind: kindDirect, Rounds: []Round{{Rate: 9000, LatencyMS: lat(2)}}},
					{Name: "egressd (tunnel)", Kind: kindEgressd, Rounds: []Round{{Rate: 7000, CPU: 20, LatencyMS: lat(3)}}},
					{Name: "egressd (inspected)", Kind: kindEgressd, Subject: true, Status: "not supported by this build (no inspect key)"},
					{Name: "squid (ssl_bump)", Kind: kindPeer, Rounds: []Round{{Rate: 1300, CPU: 230, LatencyMS: lat(20)}}},
				}},
			{ID: "idle", Title: "5000 idle tunnels, peak RSS", Unit: "MiB", LowerIsBetter: true, Scale: 5000,
				Targets: []*Target{
					{Name: "egressd", Kind: kindEgressd, Rounds: []Round{{Rate: 154}}},
					{Name: "squid", Kind: kindPeer, Rounds: []Round{{Rate: 120}}},
					{Name: "smokescreen", Kind: kindPeer, Rounds: []Round{{Rate: 200}}},
				}},
		},
	}
}

// TestRenderMarkdown checks the report rendered from structured results:
// medians, ratios to the best peer (bold when egressd is behind), the
// rows that have no figure, the smoke-run header and the chart link.
func TestRenderMarkdown(t *testing.T) {
	var b strings.Builder
	if err := renderMarkdown(&b, sample(), "BENCHMARKS.png"); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, tc := range []struct{ name, want string }{
		{"smoke header", "**Smoke run, not a measurement.**"},
		{"never by hand", "never edit it by hand"},
		{"commit", "measuring commit `abc123`"},
		{"machine", "2 CPUs (`nproc`), Test CPU, Linux 6.1"},
		{"run length", "The run took 11m30s after the installs and the build."},
		{"chart", "![throughput per proxy and latency distribution](BENCHMARKS.png)"},
		{"summary rate: median, best peer, ratios", "| keep-alive GET 1 KiB | 12,459 req/s | squid: 10,365 req/s | 1.20× | **0.62×** | **0.31×** |"},
		{"summary CPU: lower is better", "| keep-alive GET 1 KiB: proxy CPU, ms per 1,000 requests | 55.7 | squid: 87.8 | 0.63× |"},
		{"summary p99 behind the peer is bold", "| keep-alive GET 1 KiB: p99 latency | 17.6 ms | squid: 9.70 ms | **1.81×** |"},
		{"summary unsupported subject", "| keep-alive GET 1 KiB over TLS | not supported by this build (no inspect key) | | | | |\n"},
		{"summary lower-is-better rate, no relay or direct", "| 5000 idle tunnels, peak RSS | 154 MiB | squid: 120 MiB | **1.28×** | – | – |\n"},
		{"detail row", "| egressd | 12,459 | 1.20× | **0.31×** | 1.00 ms | 1.50 ms | 2.00 ms | 3.00 ms | 17.6 ms | 35.2 ms | 55.7 | 3 |"},
		{"detail failed peer", "| smokescreen | error: wrk: Non-2xx or 3xx responses: 3 |"},
		{"detail ceiling", "| relay (ceiling) | 20,000 |"},
		{"detail note", "- tinyproxy: wrk: Socket errors: read 5"},
		{"target on CPU", "| 16 | keep-alive GET 1 KiB: proxy CPU, ms per 1,000 requests ≤ 0.45× squid's | 0.63× (55.7 vs 87.8) | **missed** |"},
		{"target met", "| 16 | CONNECT bulk, plain inside ≥ 1.25× the best peer | 1.29× (1,509 vs 1,166) | met |"},
		{"target against the ceiling", "| 16 | CONNECT bulk, plain inside ≥ 0.95× the bare relay | 0.94× (1,509 vs 1,600) | **missed** |"},
		{"target ratio", "| 16 | keep-alive GET 1 KiB ≥ 1.5× squid's | 1.20× (12,459 vs 10,365) | **missed** |"},
		{"smoke verdicts", "A smoke run's verdicts mean nothing."},
		{"target absolute", "| 16 | 5000 idle tunnels, peak RSS ≤ 100 MiB | 154 MiB | **missed** |"},
		{"target without figure", "| 14 | keep-alive GET 1 KiB over TLS ≥ 1.2× squid (ssl_bump)'s | not supported by this build (no inspect key) | not measured |"},
		{"versions", "| squid | Squid Cache: Version 5.7 |"},
		{"settings", "- each proxy pinned to CPU 1"},
		{"commands", "- squid: `taskset -c 1 squid -N -f $DIR/squid.conf`"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(md, tc.want) {
				t.Errorf("markdown lacks %q; got:\n%s", tc.want, md)
			}
		})
	}
	r := sample()
	r.Smoke = false
	for _, wl := range r.Workloads {
		if wl.ID == "idle" {
			wl.Scale = 200
		}
	}
	b.Reset()
	if err := renderMarkdown(&b, r, ""); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "Smoke run") || strings.Contains(b.String(), "smoke run's") {
		t.Errorf("a full run's report says it is a smoke run")
	}
	if want := "| measured at 200, not 5000 | not measured |"; !strings.Contains(b.String(), want) {
		t.Errorf("a bound for 5,000 tunnels judged at 200: report lacks %q", want)
	}
}

// TestWriteChart checks the chart is a PNG of the expected size.
func TestWriteChart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bench.png")
	if err := writeChart(path, sample()); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("chart is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 300 {
		t.Errorf("chart is %v; want at least 1000x300", b)
	}
	if err := writeChart(path, &Results{}); err == nil {
		t.Errorf("writeChart of a run without figures = nil; want an error")
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name, only, peers string
		repeat            int
		want              string
	}{
		{"defaults", strings.Join(workloadIDs, ","), "egressd,squid,tinyproxy,smokescreen,relay", 1, ""},
		{"unknown workload", "get,conect", "relay", 1, `-only: unknown "conect"`},
		{"unknown peer", "get", "relay,haproxy", 1, `-peers: unknown "haproxy"`},
		{"no repeat", "get", "relay", 0, "-repeat must be at least 1, got 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := validate(options{only: tc.only, peers: tc.peers, repeat: tc.repeat})
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("validate(%q, %q) = %v; want %q", tc.only, tc.peers, err, tc.want)
			}
		})
	}
}

// TestRelayRunLeavesNoProcess runs the bench in quick mode with the bare
// relay only and checks that it measured through a relay process and that
// no process of the run is left once it returns.
func TestRelayRunLeavesNoProcess(t *testing.T) {
	out := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	o := quickOptions(options{only: "connect,connect-tls", peers: "relay", out: out})
	if err := run(o, []string{"-quick"}); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(runMarker); len(left) > 0 {
		t.Errorf("processes left after the run: %v", left)
	}
	if err := cleanup(); err != nil {
		t.Error(err)
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Smoke run, not a measurement", "| relay (ceiling) |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(string(md), "error:") {
		t.Errorf("report has an error row:\n%s", md)
	}
	for _, ext := range []string{".png", ".json"} {
		if _, err := os.Stat(strings.TrimSuffix(out, ".md") + ext); err != nil {
			t.Error(err)
		}
	}
}

// TestInterruptedRunLeavesNoProcess interrupts a run (this binary as the
// bench, with a run tag the test chose) and checks that the bench exits 130
// and that no process with the tag is left: once while its relay moves
// bytes, and once as soon as it has any child, which is most often one it
// runs and waits for before its first workload (git, nproc): it used to
// outlive the bench when the run forked it after the cleanup's last scan.
func TestInterruptedRunLeavesNoProcess(t *testing.T) {
	for _, tc := range []struct {
		name string
		// started is the processes whose presence means the run is where
		// the case interrupts it.
		started func(marker string) []int
	}{
		{"relay moving bytes", tagged},
		{"starting", leftovers},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 5 {
				interruptRun(t, tc.started)
			}
		})
	}
}

// interruptRun starts a bench run and sends it SIGTERM once started
// reports a process of it other than the bench itself.
func interruptRun(t *testing.T, started func(marker string) []int) {
	marker := fmt.Sprintf("test-%d-%d", os.Getpid(), time.Now().UnixNano())
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-only", "connect", "-peers", "relay", "-rounds", "100000", "-bulk", "1048576",
		"-proxy-cpu", "", "-load-cpu", "", "-out", "")
	cmd.Env = append(os.Environ(), asMainEnv+"=1", markerEnv+"="+marker)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		for _, pid := range leftovers(marker) {
			syscall.Kill(pid, syscall.SIGKILL) //nolint:errcheck // cleanup of a process that may be gone
		}
	})
	// stderr is read only once the bench has exited: exec's copying
	// goroutine writes it until then.
	if err := testwait.Poll("the bench run to start", 60*time.Second, func() error {
		// The bench itself carries the marker too.
		for _, pid := range started(marker) {
			if pid != cmd.Process.Pid {
				return nil
			}
		}
		return fmt.Errorf("not yet; the run's processes are %v", leftovers(marker))
	}); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("%v; bench said:\n%s", err, stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("interrupted bench exited with %v; want exit status 130\n%s", err, stderr.String())
	}
	if left := leftovers(marker); len(left) > 0 {
		t.Errorf("processes left after the interrupted run: %v", left)
	}
}

// tagged lists the live processes the run marked marker started with
// startProc (and their descendants): their tag (procEnv) is the marker and
// a sequence number.
func tagged(marker string) []int {
	var out []int
	tag := []byte(procEnv + "=" + marker + "-")
	forEachProc(func(pid int, stat []string) {
		if stat[0] != "Z" && envHas(pid, func(kv []byte) bool { return bytes.HasPrefix(kv, tag) }) {
			out = append(out, pid)
		}
	})
	return out
}

func TestHistQuantile(t *testing.T) {
	var h hist
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * 100 * time.Microsecond) // 0.1 … 100 ms
	}
	for _, tc := range []struct {
		name string
		q    float64
		want time.Duration
	}{
		{"p50", 0.50, 50 * time.Millisecond},
		{"p99", 0.99, 99 * time.Millisecond},
		{"p99.9", 0.999, 99900 * time.Microsecond},
		{"max", 1, 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Buckets grow by 2^(1/16): the upper edge is at most 4.5% above.
			if got := h.quantile(tc.q); got < tc.want || float64(got) > 1.045*float64(tc.want) {
				t.Errorf("quantile(%v) = %v; want %v to +4.5%%", tc.q, got, tc.want)
			}
		})
	}
	if n := h.count(); n != 1000 {
		t.Errorf("count = %d; want 1000", n)
	}
}

// wrkOutput is wrk 4.1's output with the bench's Lua done() lines.
const wrkOutput = `Running 5s test @ http://127.0.0.1:3128/
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.59ms    3.10ms  40.12ms   89.91%
    Req/Sec    12.46k     1.01k   14.01k    74.00%
  Latency Distribution
     50%    1.50ms
     75%    2.74ms
     90%    5.86ms
     99%   17.60ms
  62295 requests in 5.00s, 70.35MB read
  Socket errors: connect 0, read 12, write 0, timeout 0
Requests/sec:  12459.00
Transfer/sec:     14.07MB
egressd-bench-latency 50 1500
egressd-bench-latency 75 2740
egressd-bench-latency 90 5860
egressd-bench-latency 95 8000
egressd-bench-latency 99 17600
egressd-bench-latency 99.9 30100
`

func TestParseWrk(t *testing.T) {
	r, n, err := parseWrk(wrkOutput)
	if err != nil {
		t.Fatal(err)
	}
	if n != 62295 || r.Rate != 62295/5.0 {
		t.Errorf("parseWrk = %v requests at %v/s; want 62295 at 12459/s", n, r.Rate)
	}
	want := []float64{1.5, 2.74, 5.86, 8, 17.6, 30.1}
	if fmt.Sprint(r.LatencyMS) != fmt.Sprint(want) {
		t.Errorf("latencies = %v; want %v", r.LatencyMS, want)
	}
	if _, _, err := parseWrk(strings.Replace(wrkOutput, "egressd-bench-latency 99.9 30100\n", "", 1)); err == nil {
		t.Errorf("parseWrk without every percentile = nil error; want one")
	}
}

// TestStopReachesOtherSessions: a helper that leaves the process group
// (setsid, as Squid's helpers do) is still counted and stopped, through
// the tag in its environment.
func TestStopReachesOtherSessions(t *testing.T) {
	p, err := startProc("setsid-helper", "", "", "sh", "-c", "setsid sleep 300 & wait")
	if err != nil {
		t.Fatal(err)
	}
	if err := testwait.Poll("the helper to start", 30*time.Second, func() error {
		if pids := p.pids(); len(pids) < 2 {
			return fmt.Errorf("pids %v", pids)
		}
		return nil
	}); err != nil {
		p.stop()
		t.Fatal(err)
	}
	helpers := p.pids()
	t.Cleanup(func() {
		for _, pid := range helpers {
			syscall.Kill(pid, syscall.SIGKILL) //nolint:errcheck // cleanup of a process that may be gone
		}
	})
	p.stop()
	for _, pid := range helpers {
		if err := syscall.Kill(pid, 0); err == nil {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); !strings.Contains(string(b), ") Z ") {
				t.Errorf("process %d of the stopped group is alive: %s", pid, b)
			}
		}
	}
}

// TestRerender: a saved run renders to the same report as the run did.
func TestRerender(t *testing.T) {
	dir := t.TempDir()
	r := sample()
	if err := r.writeJSON(filepath.Join(dir, "run.json")); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "B.md")
	if err := rerender(filepath.Join(dir, "run.json"), out); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	if err := renderMarkdown(&want, r, "B.png"); err != nil {
		t.Fatal(err)
	}
	if string(got) != want.String() {
		t.Errorf("rerendered report differs from the run's:\n%s\nwant:\n%s", got, want.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "B.png")); err != nil {
		t.Errorf("no chart beside the rerendered report: %v", err)
	}
}

// repeated is a CONNECT workload measured in two repeats (-repeat 2):
// egressd's ratio to the best peer is 1.30× in the first and 1.10× in the
// second, its CPU 0.50× and 0.55× the peer's in both.
func repeated() *Results {
	rd := func(repeat int, rate, cpu float64) Round { return Round{Repeat: repeat, Rate: rate, CPU: cpu} }
	r := &Results{Command: "go run ./e2e/bench -repeat 2", Repeats: 2, Workloads: []*Workload{
		{ID: "connect", Title: "CONNECT bulk, plain inside", Unit: "MiB/s", CPUUnit: "ms per GiB",
			Targets: []*Target{
				{Name: "direct", Kind: kindDirect, Rounds: []Round{rd(0, 1400, 0), rd(1, 1400, 0)}},
				{Name: "egressd", Kind: kindEgressd, Rounds: []Round{rd(0, 1300, 250), rd(1, 1100, 275)}},
				{Name: "squid", Kind: kindPeer, Rounds: []Round{rd(0, 1000, 500), rd(1, 1000, 500)}},
			}},
	}}
	return r
}

// TestRepeatWorstRunVerdict: with -repeat, a target is met only when its
// worst repeat meets it, judged on that repeat's own medians, and the
// report gives each ratio's spread over the repeats.
func TestRepeatWorstRunVerdict(t *testing.T) {
	tests := []struct {
		name         string
		g            goal
		wantMeasured string
		wantVerdict  string
	}{
		{"the pooled medians meet it, one repeat does not", goal{issue: 16, workload: "connect", metric: "rate", against: "best", atLeast: true, bound: 1.15},
			"worst of 2 repeats: 1.10× (1,100 vs 1,000); spread 1.10×–1.30×", "**missed**"},
		{"every repeat meets it", goal{issue: 28, workload: "connect", metric: "rate", against: "best", atLeast: true, bound: 1},
			"worst of 2 repeats: 1.10× (1,100 vs 1,000); spread 1.10×–1.30×", "met"},
		{"an upper bound: the worst is the highest", goal{issue: 28, workload: "connect", metric: "cpu", against: "best", bound: 0.52},
			"worst of 2 repeats: 0.55× (275 vs 500); spread 0.50×–0.55×", "**missed**"},
		{"against direct", goal{issue: 28, workload: "connect", metric: "rate", against: kindDirect, atLeast: true, bound: 0.85},
			"worst of 2 repeats: 0.79× (1,100 vs 1,400); spread 0.79×–0.93×", "**missed**"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, measured, verdict, ok := tt.g.check(repeated())
			if !ok || measured != tt.wantMeasured || verdict != tt.wantVerdict {
				t.Errorf("check = %q, %q, %v; want %q, %q", measured, verdict, ok, tt.wantMeasured, tt.wantVerdict)
			}
		})
	}
	var b strings.Builder
	if err := renderMarkdown(&b, repeated(), ""); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| CONNECT bulk, plain inside | 1,200 MiB/s | squid: 1,000 MiB/s | 1.20× (1.10–1.30×) | – | **0.86×** (0.79–0.93×) |",
		"| CONNECT bulk, plain inside: proxy CPU, ms per GiB | 262 | squid: 500 | 0.53× (0.50–0.55×) |",
		"a target is met only when every repeat meets it",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q; got:\n%s", want, b.String())
		}
	}
	// A saved repeated run renders the same again (-render).
	dir := t.TempDir()
	if err := repeated().writeJSON(filepath.Join(dir, "run.json")); err != nil {
		t.Fatal(err)
	}
	if err := rerender(filepath.Join(dir, "run.json"), filepath.Join(dir, "B.md")); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "B.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "spread 1.10×–1.30×"; !strings.Contains(string(got), want) {
		t.Errorf("rerendered report lacks %q", want)
	}
}

// TestAddRepeat: each repeat's rounds are pooled into the same target,
// marked with their repeat, and a repeat alone gives back its own.
func TestAddRepeat(t *testing.T) {
	r := &Results{}
	for i, rate := range []float64{1300, 1100} {
		r.addRepeat(i, []*Workload{{ID: "connect", Targets: []*Target{
			{Name: "egressd", Kind: kindEgressd, Rounds: []Round{{Rate: rate}}}}}})
	}
	r.Repeats = 2
	if n := len(r.Workloads); n != 1 {
		t.Fatalf("pooled %d workloads; want 1", n)
	}
	if got := r.Workloads[0].Targets[0].Rounds; len(got) != 2 || got[1].Repeat != 1 {
		t.Errorf("pooled rounds = %+v; want two, the second of repeat 1", got)
	}
	if got := r.repeat(1).Workloads[0].Targets[0].rate(); got != 1100 {
		t.Errorf("repeat 1's rate = %v; want 1100", got)
	}
}
