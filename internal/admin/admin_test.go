package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestMetricsHandlerServesOnlyMetrics: the metrics-only listener's handler
// answers GET /metrics and refuses reload, profiles and health, which stay
// on the loopback admin listener.
func TestMetricsHandlerServesOnlyMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "egressd_test_total", Help: "test"}))
	srv := httptest.NewServer(MetricsHandler(reg))
	defer srv.Close()
	tests := []struct {
		name, method, path string
		want               int
	}{
		{"metrics", http.MethodGet, "/metrics", http.StatusOK},
		{"reload", http.MethodPost, "/-/reload", http.StatusNotFound},
		{"pprof", http.MethodGet, "/debug/pprof/", http.StatusNotFound},
		{"profile", http.MethodGet, "/debug/pprof/profile", http.StatusNotFound},
		{"readyz", http.MethodGet, "/readyz", http.StatusNotFound},
		{"healthz", http.MethodGet, "/healthz", http.StatusNotFound},
		{"metrics post", http.MethodPost, "/metrics", http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, srv.URL+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.want {
				t.Errorf("%s %s = %d; want %d", tt.method, tt.path, resp.StatusCode, tt.want)
			}
			if tt.want == http.StatusOK && !strings.Contains(string(body), "egressd_test_total 0") {
				t.Errorf("%s %s body = %q; want the registry's series", tt.method, tt.path, string(body))
			}
		})
	}
}

// TestReadyzPerListener: /readyz names every check and its state, and
// fails while any fails; /readyz/LISTENER asks only the checks that gate
// that listener, so a load balancer in front of the proxy is not told
// "not ready" for the Postgres gate's upstream, nor the reverse.
func TestReadyzPerListener(t *testing.T) {
	gateDown := errors.New("upstream 127.0.0.1:5432 does not accept connections")
	srv := httptest.NewServer(Handler(Options{
		Gatherer: prometheus.NewRegistry(),
		Ready: []Check{
			{Name: "audit", Fn: func(context.Context) error { return nil }},
			{Name: "postgres", Listeners: []string{"postgres"}, Fn: func(context.Context) error { return gateDown }},
			{Name: "bundle", Fn: func(context.Context) error { return nil }, Detail: func() string { return `revision "r2"` }},
		},
		Listeners: []string{"proxy", "postgres"},
		Log:       zap.NewNop(),
	}))
	defer srv.Close()
	tests := []struct {
		path     string
		want     int
		contains []string
	}{
		{"/readyz", http.StatusServiceUnavailable, []string{"postgres: " + gateDown.Error(), "audit: ok"}},
		{"/readyz/postgres", http.StatusServiceUnavailable, []string{"postgres: " + gateDown.Error(), "audit: ok"}},
		{"/readyz/proxy", http.StatusOK, []string{"ready", "audit: ok", `bundle: ok (revision "r2")`}},
		{"/readyz/dns", http.StatusNotFound, []string{"proxy, postgres"}},
	}
	for _, tt := range tests {
		resp, err := srv.Client().Get(srv.URL + tt.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("GET %s = %d %q; want %d", tt.path, resp.StatusCode, body, tt.want)
		}
		for _, s := range tt.contains {
			if !strings.Contains(string(body), s) {
				t.Errorf("GET %s body = %q; want it to name %q", tt.path, body, s)
			}
		}
	}
	if resp, err := srv.Client().Get(srv.URL + "/readyz/proxy"); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), "postgres") {
			t.Errorf("GET /readyz/proxy body = %q; want no postgres check", body)
		}
	}
}

// TestReadyzLogsTurns is issue 25 item 5: /readyz turning unready logs
// which check and why, once, however often it is polled; recovering logs
// once too.
func TestReadyzLogsTurns(t *testing.T) {
	var mu sync.Mutex
	var dnsErr error
	core, logs := observer.New(zap.InfoLevel)
	srv := httptest.NewServer(Handler(Options{
		Gatherer: prometheus.NewRegistry(),
		Ready: []Check{
			{Name: "audit", Fn: func(context.Context) error { return nil }},
			{Name: "dns", Fn: func(context.Context) error { mu.Lock(); defer mu.Unlock(); return dnsErr }},
		},
		Log: zap.New(core),
	}))
	defer srv.Close()
	poll := func(times int) {
		for range times {
			resp, err := srv.Client().Get(srv.URL + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
	}
	set := func(err error) { mu.Lock(); dnsErr = err; mu.Unlock() }
	poll(3)
	set(errors.New("no upstream answers: 192.0.2.53:53: i/o timeout"))
	poll(3)
	set(nil)
	poll(3)
	var got []string
	for _, e := range logs.All() {
		got = append(got, fmt.Sprintf("%s %s %v", e.Level, e.Message, e.ContextMap()))
	}
	want := []string{
		"warn not ready: check failing map[check:dns error:no upstream answers: 192.0.2.53:53: i/o timeout]",
		"info check passes again map[check:dns]",
	}
	if !slices.Equal(got, want) {
		t.Errorf("logged %q; want %q", got, want)
	}
}
