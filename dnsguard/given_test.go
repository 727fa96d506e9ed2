package dnsguard

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestServerRemembersGiven: the addresses an audited answer gave a client
// are remembered for that client and name, and nothing else is.
func TestServerRemembersGiven(t *testing.T) {
	ts := startServer(t, nil)
	ts.ask(t, "udp", "SVC.test", dns.TypeA)
	ts.ask(t, "udp", "svc.test", dns.TypeAAAA)
	ts.ask(t, "udp", "attacker.test", dns.TypeA)
	ts.ask(t, "udp", "meta.test", dns.TypeA)
	tests := []struct {
		client, name, addr string
		want               bool
	}{
		{"127.0.0.1", "svc.test", "192.0.43.10", true},
		{"127.0.0.1", "svc.test.", "2001:500:88:200::10", true},
		{"127.0.0.1", "svc.test", "192.0.43.11", false},
		{"127.0.0.2", "svc.test", "192.0.43.10", false},
		{"127.0.0.1", "meta.test", "169.254.169.254", false},
		{"127.0.0.1", "attacker.test", "192.0.43.10", false},
	}
	for _, tc := range tests {
		if got := ts.given.Gave(netip.MustParseAddr(tc.client), tc.name, netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("Gave(%s, %s, %s) = %v; want %v", tc.client, tc.name, tc.addr, got, tc.want)
		}
	}
}

// TestServerSteers: with dns.steer, an allowed name is answered with the
// transparent listener's address in its own family, and no address is
// remembered (the name decides a steered connection).
func TestServerSteers(t *testing.T) {
	ts := startServer(t, func(c *Config) { c.SteerTo = "10.0.0.53" })
	if got := answerStrings(ts.ask(t, "udp", "svc.test", dns.TypeA)); strings.Join(got, ",") != "A 10.0.0.53" {
		t.Errorf("steered A answer = %v; want A 10.0.0.53", got)
	}
	if got := answerStrings(ts.ask(t, "udp", "svc.test", dns.TypeAAAA)); len(got) != 0 {
		t.Errorf("steered AAAA answer = %v; want none (the steer address is IPv4)", got)
	}
	if resp := ts.ask(t, "udp", "attacker.test", dns.TypeA); resp.Rcode != dns.RcodeRefused {
		t.Errorf("refused name rcode = %s; want REFUSED, steering or not", dns.RcodeToString[resp.Rcode])
	}
	if ts.given.Gave(netip.MustParseAddr("127.0.0.1"), "svc.test", netip.MustParseAddr("10.0.0.53")) {
		t.Errorf("a steered answer was remembered")
	}
}

// TestGivenBounds: entries expire with their TTL (at least GivenGrace),
// a client at its bound loses its soonest-expiring name, and a full
// table remembers nothing more until something expires.
func TestGivenBounds(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	g := NewGiven(2, 3)
	g.now = func() time.Time { return now }
	c1, c2 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	a := netip.MustParseAddr("192.0.2.1")
	g.Remember(c1, "a.test", []netip.Addr{a}, time.Minute)
	g.Remember(c1, "b.test", []netip.Addr{a}, 2*time.Minute)
	g.Remember(c1, "c.test", []netip.Addr{a}, 3*time.Minute) // evicts a.test
	if g.Gave(c1, "a.test", a) || !g.Gave(c1, "b.test", a) || !g.Gave(c1, "c.test", a) {
		t.Errorf("per-client bound: a %v b %v c %v; want a evicted", g.Gave(c1, "a.test", a), g.Gave(c1, "b.test", a), g.Gave(c1, "c.test", a))
	}
	g.Remember(c2, "d.test", []netip.Addr{a}, 0)
	g.Remember(c2, "e.test", []netip.Addr{a}, time.Hour) // table full: not remembered
	if !g.Gave(c2, "d.test", a) || g.Gave(c2, "e.test", a) {
		t.Errorf("overall bound: d %v e %v; want d kept, e not remembered", g.Gave(c2, "d.test", a), g.Gave(c2, "e.test", a))
	}
	now = now.Add(GivenGrace + time.Second)
	if g.Gave(c2, "d.test", a) {
		t.Errorf("a zero-TTL answer is remembered past GivenGrace")
	}
	g.Remember(c2, "e.test", []netip.Addr{a}, time.Hour) // d expired: room
	if !g.Gave(c2, "e.test", a) || !g.Gave(c1, "c.test", a) {
		t.Errorf("after expiry: e %v c %v; want both", g.Gave(c2, "e.test", a), g.Gave(c1, "c.test", a))
	}
}
