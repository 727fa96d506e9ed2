package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/testwait"
)

// VerifyAudit runs `egressd audit verify` on e's audit directory and fails
// the test unless the chain is intact.
func VerifyAudit(t *testing.T, e *Egressd) {
	t.Helper()
	out, errOut, code := RunCLI(t, "audit", "verify", e.AuditDir)
	if code != 0 {
		t.Errorf("egressd audit verify %s = exit %d\n%s%s", e.AuditDir, code, out, errOut)
	}
}

func TestReloadUnderLoad(t *testing.T) {
	w := newWorld(t, nil)
	w.DNS.SetRR("added.test", "added.test. 60 IN A 127.0.0.1")
	c := w.E.Client("", "")
	c.Transport.(*http.Transport).MaxIdleConnsPerHost = 16

	// A request in flight across every reload.
	held := make(chan int, 1)
	go func() {
		resp, err := c.Get(w.url("upstream.test", "/hold?c=reload"))
		if err != nil {
			held <- 0
			return
		}
		resp.Body.Close()
		held <- resp.StatusCode
	}()
	// Every reload below happens with that request in flight: it has
	// reached the upstream, which holds it until the end.
	w.HTTP.WaitArrived(t, "reload")

	const workers, maxRequests = 8, 4000
	var sent, done, failed atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for sent.Add(1) <= maxRequests {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := c.Get(w.url("upstream.test", "/bytes/1024"))
				if err != nil {
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, err.Error())
					continue
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || n != 1024 {
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, fmt.Sprintf("status %d, %d bytes", resp.StatusCode, n))
					continue
				}
				done.Add(1)
			}
		})
	}
	// Load, counted in requests answered, runs before each reload and after
	// the last one, so each reload meets requests on the wire.
	const between = 25
	loadRuns := func() {
		from := done.Load()
		testwait.For(t, "requests between reloads", 10*time.Second, func() error {
			if d, f := done.Load(), failed.Load(); d < from+between && d+f < maxRequests {
				return fmt.Errorf("%d answered since the last reload, %d failed in all", d-from, f)
			}
			return nil
		})
	}
	rules := w.rules()
	for i := range 4 {
		loadRuns()
		rules = append(rules, Rule{ID: fmt.Sprintf("added-%d", i), Hosts: []string{"added.test"}, Ports: []int{w.HTTP.Port}})
		b, _ := json.Marshal(map[string]any{"rules": rules})
		if err := os.WriteFile(filepath.Join(w.Policy, "data.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			w.E.Reload(t)
		} else {
			w.E.Signal(t, syscall.SIGHUP)
		}
	}
	loadRuns()
	w.HTTP.Release("reload")
	close(stop)
	wg.Wait()
	if got := <-held; got != 200 {
		t.Errorf("request in flight across reloads = %d; want 200", got)
	}
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d requests failed during reloads; first: %v", n, min(sent.Load(), maxRequests), firstFailure.Load())
	}
	// The SIGHUP reload is asynchronous: wait for the last rule to apply.
	testwait.For(t, "GET added.test to be allowed after the reload", 5*time.Second, func() error {
		resp, err := c.Get(w.url("added.test", "/echo"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("GET added.test = %d %s", resp.StatusCode, resp.Header.Get("X-Egressd-Decision"))
		}
		return nil
	})
	// The series exists from start-up at zero: the reloads must count.
	if n := metricValue(t, w.E.Metrics(t), `egressd_reloads_total{result="ok"}`); n < 1 {
		t.Errorf("egressd_reloads_total{result=\"ok\"} = %v; want the reloads counted", n)
	}
	if err := w.E.Stop(10 * time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	VerifyAudit(t, w.E)
}

func TestReloadRefusesBrokenPolicy(t *testing.T) {
	w := newWorld(t, nil)
	if err := os.WriteFile(filepath.Join(w.Policy, "broken.rego"), []byte("package egress.http\n\ndecision := {"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, body, err := w.E.Admin(http.MethodPost, "/-/reload")
	if err != nil || code != http.StatusInternalServerError {
		t.Errorf("reload with a broken module = %d %q, %v; want 500", code, body, err)
	}
	resp, err := w.E.Client("", "").Get(w.url("upstream.test", "/echo"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET after a refused reload = %d; want 200 (old policy stays)", resp.StatusCode)
	}
}

func TestGracefulShutdown(t *testing.T) {
	w := newWorld(t, func(w *world) { w.Opts.ProxyYAML = "drain_timeout: 20s" })
	c := w.E.Client("", "")

	held := make(chan string, 1)
	go func() {
		resp, err := c.Get(w.url("upstream.test", "/hold?c=drain"))
		if err != nil {
			held <- err.Error()
			return
		}
		held <- fmt.Sprint(resp.StatusCode, " ", strings.TrimSpace(readAll(resp)))
	}()
	tun, resp := connect(t, w.E.ProxyAddr, fmt.Sprintf("upstream.test:%d", w.HTTP.Port), "")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT = %d; want 200", resp.StatusCode)
	}
	tun.SetDeadline(time.Now().Add(30 * time.Second))
	testwait.For(t, "the tunnel to be counted", 10*time.Second, metricIs(t, w.E, `egressd_proxy_active{what="tunnels"} 1`))
	w.HTTP.WaitArrived(t, "drain")

	w.E.Signal(t, syscall.SIGTERM)
	testwait.For(t, "the proxy listener to close", 10*time.Second, refusing(w.E.ProxyAddr))
	if w.E.Exited() {
		t.Fatal("egressd exited with a request and a tunnel in flight")
	}
	// The tunnel still works while draining.
	io.WriteString(tun, "GET /echo HTTP/1.1\r\nHost: upstream.test\r\n\r\n")
	r, err := http.ReadResponse(bufio.NewReader(tun), nil)
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("request through the tunnel while draining = %v, %v; want 200", r, err)
	}
	r.Body.Close()
	tun.Close()

	w.HTTP.Release("drain")
	if got := <-held; got != "200 released" {
		t.Errorf("in-flight request across SIGTERM = %q; want 200 released", got)
	}
	if err := w.E.Wait(15 * time.Second); err != nil {
		t.Fatalf("egressd exit after drain: %v", err)
	}
	w.E.WaitRecords(t, "tunnel completion", func(r audit.Record) bool { return r.Kind == "connect_done" })
	w.E.WaitRecords(t, "held request completion", func(r audit.Record) bool {
		return r.Kind == "http_done" && strings.HasPrefix(r.Path, "/hold") && r.Status == 200
	})
	VerifyAudit(t, w.E)
}

func TestShutdownDeadlineClosesTunnels(t *testing.T) {
	w := newWorld(t, func(w *world) { w.Opts.ProxyYAML = "drain_timeout: 1s" })
	tun, resp := connect(t, w.E.ProxyAddr, fmt.Sprintf("upstream.test:%d", w.HTTP.Port), "")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT = %d; want 200", resp.StatusCode)
	}
	testwait.For(t, "the tunnel to be counted", 10*time.Second, metricIs(t, w.E, `egressd_proxy_active{what="tunnels"} 1`))
	start := time.Now()
	w.E.Signal(t, syscall.SIGTERM)
	if err := w.E.Wait(10 * time.Second); err != nil {
		t.Fatalf("egressd exit: %v", err)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("exit took %v with drain_timeout 1s", d)
	}
	tun.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := tun.Read(make([]byte, 1)); err == nil {
		t.Errorf("tunnel still open after the drain deadline")
	}
	VerifyAudit(t, w.E)
}

// refusing is a testwait condition: nil once nothing accepts on addr.
func refusing(addr string) func() error {
	return func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return nil
		}
		c.Close()
		return fmt.Errorf("%s still accepts connections", addr)
	}
}

// metricIs is a testwait condition: nil once e's metrics hold line.
func metricIs(t testing.TB, e *Egressd, line string) func() error {
	return func() error {
		if m := e.Metrics(t); !strings.Contains(m, line) {
			return fmt.Errorf("no %s in\n%s", line, m)
		}
		return nil
	}
}

// A tunnel whose rule a reload removes is closed, and its completion record
// says why; a tunnel still allowed is left alone.
func TestReloadClosesRevokedTunnels(t *testing.T) {
	w := newWorld(t, nil)
	kept, resp := connect(t, w.E.ProxyAddr, fmt.Sprintf("upstream.test:%d", w.HTTP.Port), "")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT upstream.test = %d; want 200", resp.StatusCode)
	}
	revoked, resp := connect(t, w.E.ProxyAddr, fmt.Sprintf("example.com:%d", w.HTTPS.Port), "")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT example.com = %d; want 200", resp.StatusCode)
	}
	var rules []Rule
	for _, r := range w.rules() {
		if r.ID != "tls-upstream" {
			rules = append(rules, r)
		}
	}
	b, _ := json.Marshal(map[string]any{"rules": rules})
	if err := os.WriteFile(filepath.Join(w.Policy, "data.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	w.E.Reload(t)

	revoked.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := revoked.Read(make([]byte, 1)); err == nil || isTimeoutErr(err) {
		t.Errorf("read on the revoked tunnel = %d, %v; want the connection closed", n, err)
	}
	w.E.WaitRecords(t, "the revoked tunnel's completion", func(r audit.Record) bool {
		return r.Kind == "connect_done" && r.Host == "example.com" && r.Decision == "deny" && r.Reason == "no_matching_rule"
	})
	// The tunnel was waiting for its ClientHello when it was closed; the
	// interrupted check is not a tls_required refusal of its own.
	for _, r := range w.E.Records(t) {
		if r.Reason == "tls_required" {
			t.Errorf("audit record %+v: want no tls_required deny for the revoked tunnel", r)
		}
	}
	// The kept tunnel still carries a request to the plain upstream.
	kept.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(kept, "GET /echo HTTP/1.1\r\nHost: upstream.test\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(kept), nil); err != nil || resp.StatusCode != 200 {
		t.Errorf("request through the kept tunnel = %v, %v; want 200", resp, err)
	}
}

func isTimeoutErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
