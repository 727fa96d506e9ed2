package proxy

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/identity"
)

type allowAll struct{}

func (allowAll) Decide(context.Context, policy.Input) policy.Decision {
	return policy.Decision{Allow: true, Reason: "allowed", Rule: "all", Policy: "test"}
}

type openFloor struct{}

func (openFloor) Check(netip.Addr, uint16) error { return nil }

type discardAudit struct{}

func (discardAudit) Append(*audit.Record) error { return nil }

// startProxy runs a Server with the given engine, an open floor, a plain
// dialer and a discarding audit log, and returns its address.
func startProxy(tb testing.TB, e Engine, a audit.Appender) string {
	tb.Helper()
	ids, _ := identity.New(nil)
	s, err := New(Options{
		Config:     DefaultConfig(),
		Decider:    &Decider{Engine: e, Floor: openFloor{}},
		Identities: ids,
		Dialer:     &net.Dialer{},
		Audit:      a,
		Metrics:    NewMetrics(prometheus.NewRegistry(), nil),
		Log:        zap.NewNop(),
	})
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go s.Serve(ln)
	tb.Cleanup(func() { s.Shutdown(context.Background()) })
	return ln.Addr().String()
}

func BenchmarkProxyHTTPKeepAlive(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 1024)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(body) }))
	defer up.Close()
	addr := startProxy(b, allowAll{}, discardAudit{})
	pu := &url.URL{Scheme: "http", Host: addr}
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := c.Get(up.URL + "/x")
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

func BenchmarkProxyConnectBulk(b *testing.B) {
	sink, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer sink.Close()
	go func() {
		for {
			c, err := sink.Accept()
			if err != nil {
				return
			}
			go func() {
				io.Copy(io.Discard, c)
				c.Write([]byte{1})
				c.Close()
			}()
		}
	}()
	addr := startProxy(b, allowAll{}, discardAudit{})
	buf := bytes.Repeat([]byte{0xab}, 256<<10)
	const total = 64 << 20
	b.SetBytes(total)
	b.ReportAllocs()
	for b.Loop() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		io.WriteString(c, "CONNECT "+sink.Addr().String()+" HTTP/1.1\r\n\r\n")
		head := make([]byte, len("HTTP/1.1 200 Connection established\r\n\r\n"))
		if _, err := io.ReadFull(c, head); err != nil || !bytes.HasPrefix(head, []byte("HTTP/1.1 200")) {
			b.Fatalf("CONNECT: %q, %v", head, err)
		}
		for sent := 0; sent < total; sent += len(buf) {
			if _, err := c.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		c.(*net.TCPConn).CloseWrite()
		if _, err := io.ReadFull(c, head[:1]); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
