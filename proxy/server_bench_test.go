package proxy

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	xproxy "golang.org/x/net/proxy"

	"github.com/egressd/egressd/audit/audittest"
)

func BenchmarkProxyHTTPKeepAlive(b *testing.B) {
	up := httptest.NewServer(kibHandler())
	defer up.Close()
	addr := startProxy(b, benchConfig(), allowAll{}, audittest.Sink{})
	pu := &url.URL{Scheme: "http", Host: addr}
	benchGets(b, &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}, up.URL+"/x")
}

// kibHandler answers every request with the same 1 KiB body.
func kibHandler() http.Handler {
	body := bytes.Repeat([]byte("x"), 1024)
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(body) })
}

// benchGets GETs u with c once per iteration, each answer a 200 read whole.
func benchGets(b *testing.B, c *http.Client, u string) {
	benchRequests(b, func() (*http.Response, error) { return c.Get(u) })
}

// benchRequests sends one request per iteration with do, reads each answer
// (a 200) whole, and reports CPU time per request and requests per second.
// Client, proxy and upstream share the process: compare variants of the
// proxy in the same run, never these figures with another machine's.
func benchRequests(b *testing.B, do func() (*http.Response, error)) {
	b.ReportAllocs()
	cpu0, t0 := cpuTime(), time.Now()
	for b.Loop() {
		resp, err := do()
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "req/s")
}

// benchConfig lifts the per-identity rate limit so a long benchmark measures
// the proxy rather than 429s.
func benchConfig() Config {
	c := DefaultConfig()
	c.PerIdentityRate, c.PerIdentityBurst = 1e9, 1e9
	return c
}

// BenchmarkProxyConnectBulk sends 64 MiB through one CONNECT tunnel per
// iteration, with the tunnel spliced (the default) and copied in userspace
// through buffers of several sizes; cpu-ms/GiB is the whole process's CPU
// (client and sink too), so compare the variants with each other only.
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
	for _, v := range []struct {
		name    string
		copyBuf int
		socks   bool
	}{{"splice", 0, false}, {"socks-splice", 0, true}, {"copy-32KiB", 32 << 10, false}, {"copy-256KiB", 256 << 10, false}, {"copy-1MiB", 1 << 20, false}} {
		b.Run(v.name, func(b *testing.B) {
			cfg := DefaultConfig()
			if v.copyBuf != 0 {
				cfg.TunnelCopy = TunnelCopyBuffer
			}
			s, addr := startServerWith(b, Options{Config: cfg, Decider: allowAll{}, Audit: audittest.Sink{}, copyBuf: v.copyBuf})
			open := func() net.Conn { return connectTunnel(b, addr, sink.Addr().String()) }
			if v.socks {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				go s.ServeSOCKS(ln) //nolint:errcheck // ends with the server's Shutdown
				// x/net's SOCKS client wraps the connection; the bulk is
				// written to the raw one it dialled, as the CONNECT's is.
				var raw rawDialer
				d, err := xproxy.SOCKS5("tcp", ln.Addr().String(), nil, &raw)
				if err != nil {
					b.Fatal(err)
				}
				open = func() net.Conn {
					if _, err := d.Dial("tcp", sink.Addr().String()); err != nil {
						b.Fatal(err)
					}
					return raw.last
				}
			}
			benchBulk(b, open)
		})
	}
}

// rawDialer dials TCP and keeps the last connection it dialled.
type rawDialer struct{ last net.Conn }

func (r *rawDialer) Dial(network, addr string) (net.Conn, error) {
	c, err := net.Dial(network, addr)
	r.last = c
	return c, err
}

// connectTunnel opens a CONNECT tunnel through the proxy at addr to sink.
func connectTunnel(b *testing.B, addr, sink string) net.Conn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	io.WriteString(c, "CONNECT "+sink+" HTTP/1.1\r\n\r\n")
	head := make([]byte, len("HTTP/1.1 200 Connection established\r\n\r\n"))
	if _, err := io.ReadFull(c, head); err != nil || !bytes.HasPrefix(head, []byte("HTTP/1.1 200")) {
		b.Fatalf("CONNECT: %q, %v", head, err)
	}
	return c
}

// benchBulk sends 64 MiB per iteration through a tunnel open gives to the
// sink and waits for the sink's acknowledgement.
func benchBulk(b *testing.B, open func() net.Conn) {
	buf := bytes.Repeat([]byte{0xab}, 256<<10)
	const total = 64 << 20
	b.SetBytes(total)
	b.ReportAllocs()
	cpu0 := cpuTime()
	head := make([]byte, 1)
	for b.Loop() {
		c := open()
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
	b.ReportMetric(float64(cpuTime()-cpu0)/1e6/(float64(b.N)*total/(1<<30)), "cpu-ms/GiB")
}
