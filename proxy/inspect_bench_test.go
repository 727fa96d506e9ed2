package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/url"
	"testing"
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
	cfg := benchConfig()
	return startInspect(b, kibHandler(), inspectOptions{cfg: &cfg, discardAudit: true})
}

func benchHTTPS(b *testing.B, f *inspectFixture, roots *x509.CertPool, u string) {
	tr := &http.Transport{
		Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: f.proxy}),
		TLSClientConfig: &tls.Config{RootCAs: roots},
		TLSNextProto:    map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	defer tr.CloseIdleConnections()
	benchGets(b, &http.Client{Transport: tr}, u)
}
