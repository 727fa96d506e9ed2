package proxy

import (
	"bytes"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/egressd/egressd/audit/audittest"
)

// BenchmarkProxyPost sends keep-alive POSTs of 1 KiB through the proxy,
// plain HTTP and inside an inspected tunnel (the upstream speaks h2), from
// an HTTP/1.1 client, to see what the connection invariant costs a
// request with a body: over plain HTTP/1.1 a connection each. Client,
// proxy and upstream share the process: compare variants in one run.
func BenchmarkProxyPost(b *testing.B) {
	b.Run("plain", func(b *testing.B) {
		up := httptest.NewServer(kibHandler())
		defer up.Close()
		addr := startProxy(b, benchConfig(), allowAll{}, audittest.Sink{})
		pu := &url.URL{Scheme: "http", Host: addr}
		tr := &http.Transport{Proxy: http.ProxyURL(pu)}
		defer tr.CloseIdleConnections()
		benchPosts(b, &http.Client{Transport: tr}, up.URL+"/x")
	})
	b.Run("inspected", func(b *testing.B) {
		f := startInspectBench(b)
		tr := &http.Transport{
			Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: f.proxy}),
			TLSClientConfig: &tls.Config{RootCAs: f.ca.pool(b, "anonymous")},
			TLSNextProto:    map[string]func(string, *tls.Conn) http.RoundTripper{},
		}
		defer tr.CloseIdleConnections()
		benchPosts(b, &http.Client{Transport: tr}, f.url("/ok/a"))
	})
}

func benchPosts(b *testing.B, c *http.Client, u string) {
	body := bytes.Repeat([]byte("y"), 1024)
	benchRequests(b, func() (*http.Response, error) {
		return c.Post(u, "application/octet-stream", bytes.NewReader(body))
	})
}
