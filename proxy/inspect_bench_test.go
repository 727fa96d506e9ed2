package proxy

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"
)

// BenchmarkInspectedKeepAlive and BenchmarkTunnelKeepAlive send the same
// keep-alive GETs of 1 KiB over HTTPS to the same upstream (h2 capable)
// from an HTTP/1.1 client: through an inspected tunnel (decided per
// request, TLS terminated and originated again) and through an opaque one
// (decided once, bytes copied). Client, proxy and upstream share the
// process: compare the two in the same run, never with another machine's.
func BenchmarkInspectedKeepAlive(b *testing.B) {
	f := startInspectBench(b)
	benchHTTPS(b, f, f.ca.pool(b, "anonymous"), f.url("/ok/a"))
}

func BenchmarkTunnelKeepAlive(b *testing.B) {
	f := startInspectBench(b)
	roots := x509.NewCertPool()
	roots.AddCert(f.up.Certificate())
	benchHTTPS(b, f, roots, "https://127.0.0.1:"+f.port+"/ok/a")
}

func startInspectBench(b *testing.B) *inspectFixture {
	body := bytes.Repeat([]byte("x"), 1024)
	cfg := benchConfig()
	return startInspect(b, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(body) }),
		inspectOptions{cfg: &cfg, discardAudit: true})
}

func benchHTTPS(b *testing.B, f *inspectFixture, roots *x509.CertPool, u string) {
	tr := &http.Transport{
		Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: f.proxy}),
		TLSClientConfig: &tls.Config{RootCAs: roots},
		TLSNextProto:    map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	b.ReportAllocs()
	cpu0, t0 := cpuTime(), time.Now()
	for b.Loop() {
		resp, err := c.Get(u)
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
