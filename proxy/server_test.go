package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/policy"
)

type allowAll struct{}

func (allowAll) Decide(context.Context, policy.Input) policy.Decision {
	return policy.Decision{Allow: true, Reason: "allowed", Rule: "all", Policy: "test"}
}

func (allowAll) Digest() string { return "test" }

type openFloor struct{}

func (openFloor) Check(netip.Addr, uint16) error { return nil }

// startProxy runs a Server with the given engine, an open floor, a plain
// dialer and the audit log a, and returns its address.
func startProxy(tb testing.TB, cfg Config, e policy.Decider, a audit.Appender) string {
	tb.Helper()
	_, addr := startServer(tb, cfg, e, a)
	return addr
}

func startServer(tb testing.TB, cfg Config, e policy.Decider, a audit.Appender) (*Server, string) {
	tb.Helper()
	return startServerWith(tb, Options{Config: cfg, Decider: e, Audit: a})
}

// startServerWith runs a Server with o, its floor open, no identities, a
// plain dialer, fresh metrics and no log unless o sets them, and returns
// it and its address.
func startServerWith(tb testing.TB, o Options) (*Server, string) {
	tb.Helper()
	if o.Floor == nil {
		o.Floor = openFloor{}
	}
	if o.Identities == nil {
		o.Identities, _ = identity.New(nil)
	}
	if o.Dialer == nil {
		o.Dialer = &net.Dialer{}
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(prometheus.NewRegistry())
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	s, err := New(o)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	// A fixture: the server's lifecycle tests check Serve and Shutdown.
	go func() { _ = s.Serve(ln) }()
	shutdownOnCleanup(tb, s)
	return s, ln.Addr().String()
}

func proxyClient(addr string) *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr})}}
}

func TestServerRefusals(t *testing.T) {
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Connection", "X-Up")
		w.Header().Set("X-Up", "hop")
		w.Header().Set("X-End", "kept")
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadURL := "http://" + dead.Addr().String() + "/"
	dead.Close()

	tests := []struct {
		name       string
		cfg        func(*Config)
		failAudit  bool
		url        string
		requests   int
		wantStatus int
		wantReason string
		wantHits   int64
	}{
		{name: "allowed", url: up.URL + "/", requests: 1, wantStatus: 200, wantHits: 1},
		{name: "audit unavailable", failAudit: true, url: up.URL + "/", requests: 1, wantStatus: 503, wantReason: string(policy.ReasonAuditUnavailable)},
		{name: "rate limited", cfg: func(c *Config) { c.PerIdentityRate, c.PerIdentityBurst = 0.001, 1 }, url: up.URL + "/", requests: 2, wantStatus: 429, wantReason: string(policy.ReasonRateLimited), wantHits: 1},
		{name: "upstream down", url: deadURL, requests: 1, wantStatus: 502, wantReason: string(policy.ReasonUpstreamUnreachable)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hits.Store(0)
			cfg := DefaultConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			a := &audittest.Recorder{}
			a.SetFail(tt.failAudit)
			c := proxyClient(startProxy(t, cfg, allowAll{}, a))
			var resp *http.Response
			var body string
			for range tt.requests {
				var err error
				resp, err = c.Get(tt.url)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				body = string(b)
			}
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("GET %s = %d %q; want %d", tt.url, resp.StatusCode, body, tt.wantStatus)
			}
			if got := resp.Header.Get("X-Egressd-Decision"); tt.wantReason != "" && got != "deny; reason="+tt.wantReason {
				t.Errorf("X-Egressd-Decision = %q; want reason %s", got, tt.wantReason)
			}
			if hits.Load() != tt.wantHits {
				t.Errorf("upstream hits = %d; want %d", hits.Load(), tt.wantHits)
			}
			if strings.Contains(body, "127.0.0.1") {
				t.Errorf("body %q reveals an address", body)
			}
			if tt.wantStatus == 200 {
				if resp.Header.Get("X-Up") != "" || resp.Header.Get("X-End") != "kept" {
					t.Errorf("response headers = %v; want X-Up stripped and X-End kept", resp.Header)
				}
				// The completion record follows the last body byte.
				waitRecords(t, a, "http:allow:allowed,http_done::")
			}
		})
	}
}
