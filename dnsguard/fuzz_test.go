package dnsguard

import (
	"context"
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/internal/hostname"
	"github.com/egressd/egressd/policy"
)

func FuzzNewFacts(f *testing.F) {
	for _, s := range []string{"svc.test.", "A.B.C", "a..b", "a\\000b.", strings.Repeat("a", 64), "_srv._tcp.x", ".", ""} {
		f.Add(s, uint16(dns.TypeA))
	}
	f.Fuzz(func(t *testing.T, name string, qtype uint16) {
		facts, err := NewFacts(name, qtype)
		if err != nil {
			if denyReason(err) == "not a deny: "+err.Error() {
				t.Fatalf("NewFacts(%q) error %v is not a *policy.DenyError", name, err)
			}
			return
		}
		n := facts.Name
		if n != strings.ToLower(n) || len(n) > hostname.MaxLen || strings.HasSuffix(n, ".") || strings.Contains(n, "..") || strings.HasPrefix(n, ".") {
			t.Fatalf("NewFacts(%q).Name = %q; want a normalized host name", name, n)
		}
		for _, l := range strings.Split(n, ".") {
			if l == "" || len(l) > hostname.MaxLabelLen {
				t.Fatalf("NewFacts(%q).Name = %q has a bad label", name, n)
			}
		}
		if again, err := NewFacts(n, qtype); err != nil || again.Name != n {
			t.Fatalf("NewFacts is not idempotent on %q: %v, %v", n, again, err)
		}
	})
}

// onlySvc allows svc.test alone, so no fuzz input leads to an uncached
// lookup.
type onlySvc struct{}

func (onlySvc) Decide(ctx context.Context, in policy.Input) policy.Decision {
	if in.Facts.(*Facts).Name != "svc.test" {
		return policy.Decision{Reason: "no_matching_rule"}
	}
	return fakeDecider{}.Decide(ctx, in)
}

func (onlySvc) Digest() string { return "" }

// FuzzServerHandle feeds raw messages through the server's accept function
// and handler with the answer for the one allowed name already cached, so
// no input reaches the network. Whatever the input, only that name may be
// answered, only with its vetted address, and every decision on a question
// is audited.
func FuzzServerHandle(f *testing.F) {
	for _, q := range []struct {
		name  string
		qtype uint16
	}{{"svc.test.", dns.TypeA}, {"SVC.test.", dns.TypeAAAA}, {"svc.test.", dns.TypeTXT}, {"evil.test.", dns.TypeA}, {"svc.test.", dns.TypeANY}} {
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.qtype)
		m.SetEdns0(4096, true)
		b, _ := m.Pack()
		f.Add(b)
	}
	floor, _ := NewFloor(nil)
	cfg := DefaultConfig()
	cfg.Upstreams = []string{"127.0.0.1:9"}
	r, err := NewResolver(cfg, floor, zap.NewNop())
	if err != nil {
		f.Fatal(err)
	}
	vetted := netip.MustParseAddr("192.0.43.10")
	now := time.Now()
	r.cache.put("svc.test", &answer{addrs: []netip.Addr{vetted}, ttl: time.Hour, expires: now.Add(time.Hour)}, now)
	rec := &audittest.Recorder{}
	s, err := NewServer(ServerOptions{Config: cfg, Decider: onlySvc{}, Resolver: r, Audit: rec, Log: zap.NewNop()})
	if err != nil {
		f.Fatal(err)
	}
	s.limits = newLimiter(1e9, 1e9)
	client := netip.MustParseAddr("127.0.0.1")
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 12 {
			return
		}
		h := dns.Header{
			Id:      binary.BigEndian.Uint16(b),
			Bits:    binary.BigEndian.Uint16(b[2:]),
			Qdcount: binary.BigEndian.Uint16(b[4:]),
			Ancount: binary.BigEndian.Uint16(b[6:]),
			Nscount: binary.BigEndian.Uint16(b[8:]),
			Arcount: binary.BigEndian.Uint16(b[10:]),
		}
		if acceptQuery(h) != dns.MsgAccept {
			return
		}
		req := new(dns.Msg)
		if err := req.Unpack(b); err != nil {
			return
		}
		before := rec.Len()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp := s.handle(ctx, client, req)
		want := 0
		if len(req.Question) == 1 {
			want = 1
		}
		if rec.Len() != before+want {
			t.Fatalf("handle audited %d records for %d questions; want %d", rec.Len()-before, len(req.Question), want)
		}
		for _, rr := range resp.Answer {
			if !strings.EqualFold(rr.Header().Name, "svc.test.") {
				t.Fatalf("answered %s for question %v", rr, req.Question)
			}
			if a, ok := rr.(*dns.A); ok && !a.A.Equal(vetted.AsSlice()) {
				t.Fatalf("answered unvetted address %s", a.A)
			}
		}
		if len(resp.Answer) > 0 && rec.Last().Decision != "allow" {
			t.Fatalf("answered with audit decision %q", rec.Last().Decision)
		}
		if _, err := resp.Pack(); err != nil {
			t.Fatalf("response does not pack: %v", err)
		}
	})
}
