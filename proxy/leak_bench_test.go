package proxy

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/proxy/broker"
	"github.com/egressd/egressd/proxy/secretpat"
)

// BenchmarkProxyPostLeak sends keep-alive POSTs of 1 KiB and 1 MiB of
// JSON-like text with no secret in it through the plain-HTTP proxy, with
// the search for secrets leaving in requests off (no secret loaded, no
// pattern) and on (two secrets and the default patterns). Client, proxy
// and upstream share the process: compare the variants of one run.
func BenchmarkProxyPostLeak(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	for _, size := range []struct {
		name string
		n    int
	}{{"1KiB", 1 << 10}, {"1MiB", 1 << 20}} {
		unit := `{"id":12345,"name":"task-runner","tags":["a","b"],"text":"lorem ipsum dolor sit amet"},` + "\n"
		body := []byte(strings.Repeat(unit, size.n/len(unit)+1)[:size.n])
		for _, mode := range []struct {
			name string
			o    Options
		}{
			{"off", Options{Secrets: broker.NewStore(nil)}},
			{"on", Options{Secrets: leakStore(b), SecretPatterns: secretpat.MustDefaults()}},
		} {
			b.Run(size.name+"/"+mode.name, func(b *testing.B) {
				o := mode.o
				o.Config, o.Audit = benchConfig(), audittest.Sink{}
				addr := startLeakProxy(b, o, nil, nil)
				tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr})}
				defer tr.CloseIdleConnections()
				c := &http.Client{Transport: tr}
				b.SetBytes(int64(len(body)))
				benchRequests(b, func() (*http.Response, error) {
					return c.Post(up.URL+"/x", "application/json", bytes.NewReader(body))
				})
			})
		}
	}
}
