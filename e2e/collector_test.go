package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/dnsguard/dnstest"
	"github.com/egressd/egressd/internal/testwait"
)

// The OpenTelemetry collector of the export tests: e2e/testcollector, a
// module of its own built from the collector's packages (otelcol, the OTLP
// receiver, the contrib file exporter). Its cold build takes about a
// minute on the CI machine's two cores; it is built once per run.
var (
	collectorOnce sync.Once
	collectorDir  string
	collectorBin  string
	collectorErr  error
)

func buildCollector(t testing.TB) string {
	t.Helper()
	collectorOnce.Do(func() {
		if collectorDir, collectorErr = os.MkdirTemp("", "egressd-collector"); collectorErr != nil {
			return
		}
		collectorBin = filepath.Join(collectorDir, "testcollector")
		cmd := exec.Command("go", "build", "-o", collectorBin, ".")
		cmd.Dir = filepath.Join(repoRoot, "e2e", "testcollector")
		cmd.Env = cleanEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			collectorErr = fmt.Errorf("build e2e/testcollector: %w\n%s", err, out)
		}
	})
	if collectorErr != nil {
		t.Fatal(collectorErr)
	}
	return collectorBin
}

// removeCollector deletes the build; TestMain calls it.
func removeCollector() {
	if collectorDir != "" {
		os.RemoveAll(collectorDir) //nolint:errcheck // a temporary build directory; nothing to do if it stays
	}
}

// Collector is one running test collector: an OTLP/HTTP receiver on Addr
// writing every request it receives to File as a line of OTLP JSON.
type Collector struct {
	Addr, File string
	dir        string
	cmd        *exec.Cmd
	exited     chan struct{}
}

// StartCollector runs a collector writing to file (appending) on a fresh
// loopback port, or on addr when it is set (a restart after an outage).
func StartCollector(t testing.TB, addr, file string) *Collector {
	t.Helper()
	bin := buildCollector(t)
	c := &Collector{Addr: addr, File: file, dir: t.TempDir()}
	var hold interface{ Release() }
	if c.Addr == "" {
		r := ReservePort(t)
		c.Addr, hold = r.Addr(), r
	}
	cfg := filepath.Join(c.dir, "collector.yaml")
	// Own telemetry off: two collectors of a test must not both bind
	// its metrics port.
	yaml := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      http:
        endpoint: %s
exporters:
  file:
    path: %s
    append: true
    flush_interval: 10ms
service:
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
  pipelines:
    logs:
      receivers: [otlp]
      exporters: [file]
`, c.Addr, file)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(c.dir, "collector.log"))
	if err != nil {
		t.Fatal(err)
	}
	c.cmd = exec.Command(bin, "--config", cfg)
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	if hold != nil {
		hold.Release()
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start collector: %v", err)
	}
	c.exited = make(chan struct{})
	go func() {
		c.cmd.Wait() //nolint:errcheck // a collector stopped by a test exits non-zero
		logf.Close()
		close(c.exited)
	}()
	t.Cleanup(func() {
		c.Stop(t)
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(c.dir, "collector.log"))
			t.Logf("collector log:\n%s", b)
		}
	})
	testwait.For(t, "collector listening on "+c.Addr, 30*time.Second, func() error {
		select {
		case <-c.exited:
			return errors.New("collector exited")
		default:
		}
		conn, err := net.DialTimeout("tcp", c.Addr, time.Second)
		if err != nil {
			return err
		}
		return conn.Close()
	})
	return c
}

// Stop ends the collector with SIGTERM (it flushes the file first).
func (c *Collector) Stop(t testing.TB) {
	t.Helper()
	select {
	case <-c.exited:
		return
	default:
	}
	c.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // exited is watched below
	select {
	case <-c.exited:
	case <-time.After(15 * time.Second):
		c.cmd.Process.Kill() //nolint:errcheck // past the deadline
		<-c.exited
		t.Errorf("collector did not stop on SIGTERM")
	}
}

// exportOptions is an egressd exporting to c (OTLP) and, if ocsf is set,
// to that file, as replica.
func exportOptions(t testing.TB, c *Collector, replica, ocsf, auditDir string) Options {
	t.Helper()
	// Every refusal written in full: the tests count records.
	y := "refusal_samples: 1000000\nexport:\n  otlp: true\n  replica: " + replica + "\n  batch_size: 25\n  poll: 20ms\n  max_backoff: 200ms"
	if ocsf != "" {
		y += "\n  ocsf: " + ocsf
	}
	return Options{AuditYAML: y, AuditDir: auditDir, DNS: dnstest.Start(t).Addr(), Env: []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + c.Addr,
		"OTEL_EXPORTER_OTLP_TIMEOUT=2000",
	}}
}

// exportMetric reads one of the export metrics of sink.
func exportMetric(t testing.TB, e *Egressd, name, sink string) float64 {
	t.Helper()
	return metricValue(t, e.Metrics(t), name+`{sink="`+sink+`"}`)
}

// waitDrained waits until sink has delivered every record written.
func waitDrained(t testing.TB, e *Egressd, sink string) {
	t.Helper()
	testwait.For(t, sink+" export drained", 30*time.Second, func() error {
		m := e.Metrics(t)
		if lag := metricValue(t, m, `egressd_audit_export_lag_records{sink="`+sink+`"}`); lag != 0 {
			return fmt.Errorf("lag %v records", lag)
		}
		return nil
	})
}

// logHead is seq of the last record in e's audit log.
func logHead(t testing.TB, e *Egressd) int {
	t.Helper()
	recs := e.Records(t)
	return int(recs[len(recs)-1].Seq)
}

// verifyLine runs `egressd audit verify args…` and returns its output and
// exit code.
func verifyLine(t testing.TB, args ...string) (string, int) {
	t.Helper()
	out, errOut, code := RunCLI(t, append([]string{"audit", "verify"}, args...)...)
	return out + errOut, code
}

// deniedRequests sends n requests the default policy denies, each with a
// traceparent, and fails if one is not answered 403 within limit.
func deniedRequests(t testing.TB, e *Egressd, n int, limit time.Duration) {
	t.Helper()
	c := e.Client("", "")
	c.Timeout = limit
	for i := range n {
		req, err := http.NewRequest(http.MethodGet, "http://blocked.example/r/"+strconv.Itoa(i), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Traceparent", testTraceparent)
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		readAll(resp)
		if resp.StatusCode != 403 {
			t.Fatalf("request %d: status %d; want 403", i, resp.StatusCode)
		}
		if d := time.Since(start); d > limit {
			t.Fatalf("request %d took %v; want < %v", i, d, limit)
		}
	}
}

const testTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
