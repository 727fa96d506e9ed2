package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/audittest"
)

// cutRecord waits for the record of kind whose path starts with path and
// checks that it names the drain's cut.
func cutRecord(t *testing.T, a *audittest.Recorder, kind audit.Kind, path string) {
	t.Helper()
	for _, r := range a.Records() {
		if r.Kind != kind || !strings.HasPrefix(r.Path, path) {
			continue
		}
		if r.Reason != "shutting_down" || r.Error != drainCutDetail {
			t.Errorf("%s %s = reason %q error %q; want shutting_down, %q", kind, path, r.Reason, r.Error, drainCutDetail)
		}
		return
	}
	t.Errorf("no %s record for %s once Shutdown returned; records:\n%s", kind, path, audittest.Summary(a.Records()))
}

// TestDrainDeadlineCutsAreRecorded: a drain that reaches its deadline cuts
// a plain request waiting for its upstream and an opaque tunnel, and each
// completion record names the cut (reason shutting_down) before Shutdown
// returns. Before, the request was left running unrecorded as the process
// exited, and the tunnel's record carried no reason.
func TestDrainDeadlineCutsAreRecorded(t *testing.T) {
	url, arrived, _ := blockingUpstream(t)
	a := &audittest.Recorder{}
	s, addr := startServer(t, DefaultConfig(), allowAll{}, a)

	plain, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	fmt.Fprintf(plain, "GET %s/held HTTP/1.1\r\nHost: x\r\n\r\n", url)
	<-arrived

	tun, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer tun.Close()
	host := strings.TrimPrefix(url, "http://")
	fmt.Fprintf(tun, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", host, host)
	br := bufio.NewReader(tun)
	if resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s = %v, %v; want 200", host, resp, err)
	}
	// A request through the tunnel reaching the upstream: the tunnel runs.
	fmt.Fprintf(tun, "GET /through HTTP/1.1\r\nHost: %s\r\n\r\n", host)
	<-arrived

	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the deadline has passed
	if err := s.Shutdown(ctx); err == nil {
		t.Errorf("Shutdown past its deadline = nil; want the context's error")
	}
	cutRecord(t, a, audit.KindHTTPDone, "/held")
	cutRecord(t, a, audit.KindConnectDone, "")
}

// TestDrainDeadlineCutsInspectedRequest: a request inside an inspected
// tunnel still waiting for its upstream at the drain's deadline is recorded
// shutting_down, not client_closed, and so is its tunnel.
func TestDrainDeadlineCutsInspectedRequest(t *testing.T) {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	defer close(release)
	f := startInspect(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		io.WriteString(w, "late")
	}), inspectOptions{})
	errc := make(chan error, 1)
	go func() {
		resp, err := f.client(t, false).Get(f.url("/ok/held"))
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	select {
	case <-arrived:
	case err := <-errc:
		t.Fatalf("inspected GET ended before reaching the upstream: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.srv.Shutdown(ctx); err == nil {
		t.Errorf("Shutdown past its deadline = nil; want the context's error")
	}
	select {
	case err := <-errc:
		if err == nil {
			t.Error("inspected GET cut by the drain succeeded; want the cut as an error")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("client still waiting 20s after the drain cut its tunnel")
	}
	cutRecord(t, f.audit, audit.KindHTTPDone, "/ok/held")
	cutRecord(t, f.audit, audit.KindConnectDone, "")
}

// TestBodyIdleTimeoutNamedInRecord: a response body that stalls past
// proxy.body_idle_timeout is cut, and its completion record says so; before,
// it read "response cut short: context canceled".
func TestBodyIdleTimeoutNamedInRecord(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		io.WriteString(w, "part")
		w.(http.Flusher).Flush()
		<-release
	}))
	defer up.Close()
	defer close(release) // before Close, which waits for the handler
	cfg := DefaultConfig()
	cfg.BodyIdleTimeout = 200 * time.Millisecond
	a := &audittest.Recorder{}
	_, addr := startServer(t, cfg, allowAll{}, a)
	resp, err := proxyClient(addr).Get(up.URL + "/stall")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	r := waitDone(t, a)
	if !strings.Contains(r.Error, "body_idle_timeout") {
		t.Errorf("completion of a stalled body = reason %q error %q; want the error to name proxy.body_idle_timeout", r.Reason, r.Error)
	}
}
