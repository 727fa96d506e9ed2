package deploy

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/dnsguard"
	"github.com/egressd/egressd/dnsguard/dnstest"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/internal/testwait"
	"github.com/egressd/egressd/policy"
)

// TestKubernetesDNSAnswersSandbox (issue 25 item 1): the example sandbox
// uses egressd as its only resolver, and a DNS query carries no
// credentials, so its identity must list sources covering the sandbox's
// pod addresses. The DNS server, built with the example config's
// identities and DNS section and the policy as the pod mounts it, answers
// an allowed name for a client in that range and refuses a name the
// policy does not allow. The test cannot send from the pod CIDR, so it
// maps the identity's sources to 127.0.0.0/8; the mapping as shipped is
// checked with the same lookup the server uses (identity.Store.BySource).
func TestKubernetesDNSAnswersSandbox(t *testing.T) {
	m := loadManifests(t)
	cfg := m.egressdConfig(t)
	sandbox := must(t, m.deployments, sandboxNS+"/sandbox-agent-1")
	id := sandbox.Spec.Template.Labels[identityLabel]
	idx := -1
	for i, e := range cfg.Identities {
		if e.ID == id {
			idx = i
		}
	}
	if idx < 0 {
		t.Fatalf("example sandbox's %s = %q names no identity in egressd-config", identityLabel, id)
	}
	if len(cfg.Identities[idx].Sources) == 0 {
		t.Fatalf("identity %s has no sources: its sandbox's DNS queries would all be refused unknown_client", id)
	}
	shipped, err := identity.New(cfg.Identities)
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range cfg.Identities[idx].Sources {
		pod := netip.MustParsePrefix(src).Addr().Next()
		if got, ok := shipped.BySource(pod); !ok || got.ID != id {
			t.Errorf("BySource(%s) = %q, %v; want %s", pod, got.ID, ok, id)
		}
	}

	loopback := append(identity.Config(nil), cfg.Identities...)
	loopback[idx].Sources = []string{"127.0.0.0/8"}
	ids, err := identity.New(loopback)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	engine, err := policy.New(ctx, policy.Config{Dir: m.mountPolicy(t, func(d string) string { return d })}, zap.NewNop())
	if err != nil {
		t.Fatalf("policy.New(mounted egressd-policy) = %v", err)
	}
	up := dnstest.Start(t)
	up.SetRR("pypi.org", "pypi.org. 60 IN A 151.101.0.223")
	up.SetRR("example.com", "example.com. 60 IN A 93.184.215.14")
	dnsCfg := cfg.DNS
	dnsCfg.Upstreams = []string{up.Addr()}
	floor, err := dnsguard.NewFloor(cfg.Internal)
	if err != nil {
		t.Fatalf("NewFloor(internal) = %v", err)
	}
	res, err := dnsguard.NewResolver(dnsCfg, floor, zap.NewNop())
	if err != nil {
		t.Fatalf("NewResolver = %v", err)
	}
	rec := &audittest.Recorder{}
	srv, err := dnsguard.NewServer(dnsguard.ServerOptions{
		Config: dnsCfg, Decider: engine, Resolver: res, Audit: rec, Identities: ids, Log: zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("NewServer = %v", err)
	}
	pc, ln, err := dnstest.ListenPair()
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, pc, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	addr := pc.LocalAddr().String()
	c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
	ask := func(name string) (*dns.Msg, error) {
		q := new(dns.Msg)
		q.SetQuestion(dns.Fqdn(name), dns.TypeA)
		resp, _, err := c.Exchange(q, addr)
		return resp, err
	}
	// Serve has no started signal once given a conn: poll until it answers.
	testwait.For(t, "the dns server on "+addr+" to answer", 10*time.Second, func() error {
		_, err := ask("ready.invalid")
		return err
	})

	tests := []struct {
		name   string
		rcode  int
		reason policy.Reason
	}{
		{"pypi.org", dns.RcodeSuccess, policy.ReasonAllowed},
		{"example.com", dns.RcodeRefused, policy.ReasonNoMatchingRule},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := rec.Len()
			resp, err := ask(tt.name)
			if err != nil {
				t.Fatalf("query %s: %v", tt.name, err)
			}
			if resp.Rcode != tt.rcode || (tt.rcode == dns.RcodeSuccess) != (len(resp.Answer) > 0) {
				t.Errorf("query %s from 127.0.0.1 = %s with %d answers; want %s", tt.name,
					dns.RcodeToString[resp.Rcode], len(resp.Answer), dns.RcodeToString[tt.rcode])
			}
			got := rec.Wait(t, func(recs []audit.Record) bool { return len(recs) > n })[n]
			if got.Identity != id || got.Reason != tt.reason.String() {
				t.Errorf("audit record for %s: identity %q, reason %q; want %s, %s", tt.name, got.Identity, got.Reason, id, tt.reason)
			}
		})
	}
}
