package dnsguard

import (
	"context"
	"net/netip"
	"testing"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/dnsguard/dnstest"
	"github.com/egressd/egressd/internal/metrics"
	"github.com/egressd/egressd/policy"
)

// TestRateLimitedQueriesCounted: a query refused by the per-client rate
// limit is not audited (a flood must not become an audit-log flood) but is
// counted, so the flood shows in egressd_decisions_total (issue 17 item 6).
func TestRateLimitedQueriesCounted(t *testing.T) {
	up := dnstest.Start(t)
	up.SetRR("svc.test", "svc.test. 3600 IN A 192.0.43.10")
	cfg := testConfig(up.Addr())
	cfg.RateLimit, cfg.Burst = 0.001, 2
	r, _ := newTestResolver(t, cfg, nil)
	d := metrics.NewDecisions(prometheus.NewRegistry())
	rec := &audittest.Recorder{}
	s, err := NewServer(ServerOptions{Config: cfg, Decider: fakeDecider{}, Resolver: r, Audit: rec, Log: zap.NewNop(), Decisions: d})
	if err != nil {
		t.Fatal(err)
	}
	client := netip.MustParseAddr("192.0.2.7")
	var refused int
	for range 5 {
		req := new(dns.Msg).SetQuestion("svc.test.", dns.TypeA)
		if s.handle(context.Background(), client, req).Rcode == dns.RcodeRefused {
			refused++
		}
	}
	if refused != 3 {
		t.Fatalf("refused %d of 5 queries with burst 2; want 3", refused)
	}
	var m dto.Metric
	if err := d.With(audit.KindDNS, audit.DecisionDeny, policy.ReasonRateLimited).Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 3 {
		t.Errorf("dns deny rate_limited = %v; want 3", got)
	}
	if n := rec.Len(); n != 2 {
		t.Errorf("audit records = %d; want 2 (the rate-limited queries are not audited)", n)
	}
}
