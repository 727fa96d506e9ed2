package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/policy"
)

// blockingUpstream answers after release is closed; arrived gets one
// value per request.
func blockingUpstream(t *testing.T) (url string, arrived chan struct{}, release chan struct{}) {
	arrived, release = make(chan struct{}, 8), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		io.WriteString(w, "late")
	}))
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
		up.Close()
	})
	return up.URL, arrived, release
}

// waitDone waits for the http_done record.
func waitDone(t *testing.T, a *audittest.Recorder) audit.Record {
	t.Helper()
	return a.WaitRecord(t, func(r audit.Record) bool { return r.Kind == "http_done" })
}

// TestClientClosedBeforeResponse is issue 11 item 14: a client that hung
// up before the upstream answered was recorded deny upstream_unreachable
// "context canceled". The decision was an allow; the completion says the
// client closed, and the metric counts it apart from upstream failures.
func TestClientClosedBeforeResponse(t *testing.T) {
	url, arrived, _ := blockingUpstream(t)
	a := &audittest.Recorder{}
	s := startAudited(t, DefaultConfig(), nil, a, zap.NewNop())
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET %s/slow HTTP/1.1\r\nHost: x\r\n\r\n", url)
	<-arrived
	c.Close()
	r := waitDone(t, a)
	if r.Decision != "" || r.Reason != "" || r.Error != "client_closed" {
		t.Errorf("completion = decision %q reason %q error %q; want no decision, error client_closed", r.Decision, r.Reason, r.Error)
	}
	if n := counterValue(t, s.metrics.clientClosed.WithLabelValues("waiting")); n != 1 {
		t.Errorf("client_closed{when=waiting} = %v; want 1", n)
	}
	if n := counterValue(t, s.metrics.Decisions.With(audit.KindHTTPDone, audit.DecisionDeny, policy.ReasonUpstreamUnreachable)); n != 0 {
		t.Errorf("upstream failures = %v; want 0", n)
	}
}

// TestClientCutResponseShort is issue 11 item 14: a response the client
// cut short was recorded as a clean 200.
func TestClientCutResponseShort(t *testing.T) {
	var written atomic.Int64
	started := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 32<<10)
		// At most 64 MiB: the proxy stops reading long before.
		for i := 0; i < 2048; i++ {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			written.Add(int64(len(chunk)))
			if i == 0 {
				w.(http.Flusher).Flush()
				started <- struct{}{}
			}
		}
	}))
	defer up.Close()
	a := &audittest.Recorder{}
	s := startAudited(t, DefaultConfig(), nil, a, zap.NewNop())
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET %s/big HTTP/1.1\r\nHost: x\r\n\r\n", up.URL)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	io.CopyN(io.Discard, resp.Body, 1024)
	c.Close()
	r := waitDone(t, a)
	if r.Status != 200 || r.Error != "client_closed" {
		t.Errorf("completion = status %d error %q; want 200 with error client_closed (cut short), not a clean 200", r.Status, r.Error)
	}
	if n := counterValue(t, s.metrics.clientClosed.WithLabelValues("response")); n != 1 {
		t.Errorf("client_closed{when=response} = %v; want 1", n)
	}
	if r.BytesIn >= 2048*32<<10 {
		t.Errorf("bytes_in = %d; want less than the whole body", r.BytesIn)
	}
}

// TestUpstreamCutResponseShort: a body the upstream ended before its
// Content-Length is recorded as cut short, not as a clean 200.
func TestUpstreamCutResponseShort(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort")
		brw.Flush()
		c.Close()
	}))
	defer up.Close()
	a := &audittest.Recorder{}
	s := startAudited(t, DefaultConfig(), nil, a, zap.NewNop())
	resp, err := proxyClient(s.addr).Get(up.URL + "/")
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	r := waitDone(t, a)
	if r.Status != 200 || !strings.HasPrefix(r.Error, "response cut short: ") {
		t.Errorf("completion = status %d error %q; want 200 with error \"response cut short: …\"", r.Status, r.Error)
	}
}
