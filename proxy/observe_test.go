package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/dnsguard"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/policy"
)

// startObserving runs a proxy deciding with e, the identities ids (nil:
// every client anonymous) and an open floor; it returns the address and
// the registry its metrics are on.
func startObserving(t *testing.T, e policy.Decider, ids identity.Config, a audit.Appender) (string, *prometheus.Registry) {
	t.Helper()
	store, err := identity.New(ids)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	s, err := New(Options{Config: DefaultConfig(), Decider: e, Floor: openFloor{}, Identities: store,
		Dialer: &net.Dialer{}, Audit: a, Metrics: NewMetrics(reg), Log: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return ln.Addr().String(), reg
}

// wouldDenyCount is egressd_would_deny_total{kind, reason, observed_by}.
func wouldDenyCount(t *testing.T, reg *prometheus.Registry, kind, reason, by string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "egressd_would_deny_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["kind"] == kind && l["reason"] == reason && l["observed_by"] == by {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

// TestObserveHTTP: a request an observed rule or an observing identity
// would deny reaches the upstream, its record is an allow carrying
// would_deny and observed_by, and egressd_would_deny_total counts it; what
// an enforced rule denies stays denied.
func TestObserveHTTP(t *testing.T) {
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	port := up.Listener.Addr().(*net.TCPAddr).Port
	e := inspectEngine(t, fmt.Sprintf(`{"rules": [
		{"id": "watch", "hosts": ["127.0.0.1"], "ports": [%d], "paths": ["/watched/**"], "action": "deny", "mode": "observe"},
		{"id": "hard", "hosts": ["127.0.0.1"], "ports": [%d], "paths": ["/hard/**"], "action": "deny"}
	]}`, port, port))
	tests := []struct {
		name       string
		ids        identity.Config
		path       string
		wantStatus int
		wouldDeny  string
		by         string
		rule       string
	}{
		{"observed rule", nil, "/watched/x", http.StatusOK, "rule_deny", "rule", "watch"},
		{"enforced rule", nil, "/hard/x", http.StatusForbidden, "", "", "hard"},
		{"no rule", nil, "/other", http.StatusForbidden, "", "", ""},
		{"observing identity", identity.Config{{ID: "watched", Sources: []string{"127.0.0.1/32"}, Mode: "observe"}}, "/other", http.StatusOK, "no_matching_rule", "identity", ""},
		{"observing identity, enforced rule", identity.Config{{ID: "watched", Sources: []string{"127.0.0.1/32"}, Mode: "observe"}}, "/hard/x", http.StatusOK, "rule_deny", "identity", "hard"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &audittest.Recorder{}
			addr, reg := startObserving(t, e, tt.ids, a)
			before := hits.Load()
			resp, err := proxyClient(addr).Get(up.URL + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("GET %s = %d; want %d", tt.path, resp.StatusCode, tt.wantStatus)
			}
			allow := tt.wantStatus == http.StatusOK
			if got := hits.Load() - before; got != map[bool]int64{true: 1}[allow] {
				t.Errorf("upstream hits = %d; want 1 exactly when allowed", got)
			}
			r := a.WaitRecord(t, func(r audit.Record) bool { return r.Kind == audit.KindHTTP })
			if r.Decision != audit.DecisionOf(allow) || r.WouldDeny != tt.wouldDeny || r.ObservedBy != tt.by || r.Rule != tt.rule {
				t.Errorf("record %+v; want decision %s, would_deny %q observed_by %q rule %q", r, audit.DecisionOf(allow), tt.wouldDeny, tt.by, tt.rule)
			}
			if tt.wouldDeny != "" {
				if n := wouldDenyCount(t, reg, "http", tt.wouldDeny, tt.by); n != 1 {
					t.Errorf("egressd_would_deny_total{http,%s,%s} = %v; want 1", tt.wouldDeny, tt.by, n)
				}
			}
		})
	}
}

// TestObserveConnect: under a bundle in observe mode a CONNECT no rule
// allows is an opaque tunnel that still checks what goes through it: TLS
// to the host it names passes, another SNI or plaintext is cut.
func TestObserveConnect(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	port := up.Listener.Addr().(*net.TCPAddr).Port
	e := inspectEngine(t, `{"mode": "observe", "rules": []}`)
	a := &audittest.Recorder{}
	addr, reg := startObserving(t, e, nil, a)
	target := fmt.Sprintf("localhost:%d", port)

	get := func(sni string) (*http.Response, error) {
		tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr}),
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: sni}}
		defer tr.CloseIdleConnections()
		return (&http.Client{Transport: tr}).Get("https://" + target + "/")
	}
	resp, err := get("localhost")
	if err != nil {
		t.Fatalf("GET through an observed tunnel: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET through an observed tunnel = %d; want 200", resp.StatusCode)
	}
	r := a.WaitRecord(t, func(r audit.Record) bool { return r.Kind == audit.KindConnect })
	if r.Decision != audit.DecisionAllow || r.WouldDeny != "no_matching_rule" || r.ObservedBy != "bundle" {
		t.Errorf("connect record %+v; want an allow with would_deny no_matching_rule observed_by bundle", r)
	}
	if n := wouldDenyCount(t, reg, "connect", "no_matching_rule", "bundle"); n != 1 {
		t.Errorf("egressd_would_deny_total{connect,no_matching_rule,bundle} = %v; want 1", n)
	}

	if _, err := get("evil.test"); err == nil {
		t.Errorf("GET with SNI evil.test through a tunnel to localhost succeeded; want it cut")
	}
	a.WaitRecord(t, func(r audit.Record) bool {
		return r.Kind == audit.KindConnectDone && r.Reason == string(policy.ReasonSNIMismatch)
	})

	c, br := openTunnel(t, addr, target, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
	defer c.Close()
	if b, _ := io.ReadAll(br); len(b) != 0 {
		t.Errorf("plaintext through an observed tunnel got %q; want the tunnel closed", b)
	}
	a.WaitRecord(t, func(r audit.Record) bool {
		return r.Kind == audit.KindConnectDone && r.Reason == string(policy.ReasonTLSRequired)
	})
}

// TestObserveKeepsFloor: the address floor is Go's, not a rule's: under a
// bundle in observe mode, a metadata or loopback literal is refused with
// the floor's reason and no would_deny.
func TestObserveKeepsFloor(t *testing.T) {
	floor, err := dnsguard.NewFloor(nil)
	if err != nil {
		t.Fatal(err)
	}
	d := &policy.PreDial{Engine: inspectEngine(t, `{"mode": "observe", "rules": []}`), Floor: floor}
	ctx := context.Background()
	tests := []struct {
		url, authority string
		want           policy.Reason
	}{
		{"http://169.254.169.254/latest/meta-data/", "169.254.169.254:443", policy.ReasonMetadataAddress},
		{"http://[fd00:ec2::254]/", "[fd00:ec2::254]:443", policy.ReasonMetadataAddress},
		{"http://127.0.0.1:8080/", "127.0.0.1:8080", policy.ReasonLoopbackAddress},
		{"http://10.0.0.1/", "10.0.0.1:443", policy.ReasonPrivateAddress},
	}
	for _, tt := range tests {
		o := d.DecideHTTP(ctx, identity.Anonymous, policy.KindHTTP, policy.HTTPRequest{Method: http.MethodGet, Target: tt.url})
		if o.Decision.Allow || o.Decision.Reason != tt.want || o.Decision.WouldDeny != nil {
			t.Errorf("DecideHTTP(%s) = %+v; want deny %s without would_deny", tt.url, o.Decision, tt.want)
		}
		if o := d.DecideConnect(ctx, identity.Anonymous, tt.authority); o.Decision.Allow || o.Decision.Reason != tt.want || o.Decision.WouldDeny != nil {
			t.Errorf("DecideConnect(%s) = %+v; want deny %s without would_deny", tt.authority, o.Decision, tt.want)
		}
	}
	// Control: the same bundle lets a public name through, observed.
	if o := d.DecideHTTP(ctx, identity.Anonymous, policy.KindHTTP, policy.HTTPRequest{Method: http.MethodGet, Target: "http://example.com/"}); !o.Decision.Allow || o.Decision.WouldDeny == nil {
		t.Errorf("DecideHTTP(example.com) = %+v; want an observed allow", o.Decision)
	}
}
