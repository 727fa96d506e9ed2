package e2e

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testport"
	"github.com/egressd/egressd/internal/testwait"
)

// gateUpstream is a TCP listener standing in for the Postgres gate's
// upstream where a test needs the gate ready (/readyz dials the upstream)
// but never logs in: the kernel completes the handshake, nothing answers.
func gateUpstream(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// gateYAML is a postgres: section listening on listen with upstream as its
// upstream (host:port).
func gateYAML(listen, upstream, extra string) string {
	host, port, _ := net.SplitHostPort(upstream)
	return fmt.Sprintf("postgres:\n  listen: %s\n  upstream: \"host=%s port=%s user=nobody sslmode=disable\"\n%s", listen, host, port, extra)
}

// TestDrainStopsEveryListenerAtOnce (issue 21, item 21): on SIGTERM
// /readyz fails at once and the Postgres gate stops accepting while the
// proxy still drains a request in flight. Before, /readyz answered 200
// through the drain, and the gate went on accepting logins until the
// proxy had drained (up to proxy.drain_timeout).
func TestDrainStopsEveryListenerAtOnce(t *testing.T) {
	up := gateUpstream(t)
	pgPort := ReservePort(t)
	w := newWorld(t, func(w *world) {
		w.Opts.ProxyYAML = "drain_timeout: 30s"
		w.Opts.Hold = []*testport.Reservation{pgPort}
		w.Opts.YAML = InternalAllow(w.HTTP.Addr, w.HTTPS.Addr, up) + gateYAML(pgPort.Addr(), up, "")
	})
	for _, path := range []string{"/readyz", "/readyz/proxy", "/readyz/postgres"} {
		if code, body, err := w.E.Admin(http.MethodGet, path); err != nil || code != http.StatusOK {
			t.Fatalf("GET %s before the drain = %d %q, %v; want 200", path, code, body, err)
		}
	}
	// Released on every path: a failure below must not leave the upstream
	// (and so the test's cleanup) waiting on the held request.
	release := sync.OnceFunc(func() { w.HTTP.Release("order") })
	t.Cleanup(release)
	held := make(chan string, 1)
	go func() {
		resp, err := w.E.Client("", "").Get(w.url("upstream.test", "/hold?c=order"))
		if err != nil {
			held <- err.Error()
			return
		}
		held <- fmt.Sprint(resp.StatusCode, " ", strings.TrimSpace(readAll(resp)))
	}()
	w.HTTP.WaitArrived(t, "order")

	w.E.Signal(t, syscall.SIGTERM)
	testwait.For(t, "/readyz 503 naming the drain", 10*time.Second, func() error {
		code, body, err := w.E.Admin(http.MethodGet, "/readyz")
		if err == nil && (code != http.StatusServiceUnavailable || !strings.Contains(body, "draining")) {
			err = fmt.Errorf("/readyz = %d %q", code, body)
		}
		return err
	})
	testwait.For(t, "the gate to refuse new clients", 10*time.Second, refusing(pgPort.Addr()))
	if w.E.Exited() {
		t.Fatal("egressd exited with a request in flight")
	}
	release()
	if got := <-held; got != "200 released" {
		t.Errorf("in-flight request across SIGTERM = %q; want 200 released", got)
	}
	if err := w.E.Wait(15 * time.Second); err != nil {
		t.Fatalf("egressd exit after drain: %v", err)
	}
	VerifyAudit(t, w.E)
}
