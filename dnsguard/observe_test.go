package dnsguard

import (
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// TestServerObserveMode: under a bundle in observe mode a name no rule
// allows is resolved and answered, its record an allow with would_deny;
// what the server cannot answer (TXT), metadata names and answers the
// floor refuses stay refused, without would_deny.
func TestServerObserveMode(t *testing.T) {
	ts := startServerWith(t, engineWithData(t, `{"mode": "observe", `+strings.TrimPrefix(testRules, "{")), nil)
	ts.upstream.SetRR("observed.test", "observed.test. 60 IN A 192.0.43.20")
	for _, c := range []struct {
		qname     string
		qtype     uint16
		rcode     int
		decision  string
		reason    string
		wouldDeny string
	}{
		{"svc.test", dns.TypeA, dns.RcodeSuccess, "allow", "allowed", ""},
		{"wild.test", dns.TypeA, dns.RcodeNameError, "deny", "dns_nxdomain", ""},
		{"observed.test", dns.TypeA, dns.RcodeSuccess, "allow", "allowed", "no_matching_rule"},
		// A name without addresses is an empty answer: still observed.
		{"attacker.test", dns.TypeA, dns.RcodeSuccess, "allow", "dns_no_address", "no_matching_rule"},
		{"svc.test", dns.TypeTXT, dns.RcodeRefused, "deny", "qtype_not_allowed", ""},
		{"metadata.google.internal", dns.TypeA, dns.RcodeRefused, "deny", "metadata_name", ""},
		{"meta.test", dns.TypeA, dns.RcodeRefused, "deny", "metadata_address", ""},
	} {
		resp := ts.ask(t, "udp", c.qname, c.qtype)
		rec := ts.audit.Last()
		if c.qname == "observed.test" && len(resp.Answer) != 1 {
			t.Errorf("observed.test A answered %v; want its address", resp.Answer)
		}
		if resp.Rcode != c.rcode || string(rec.Decision) != c.decision || rec.Reason != c.reason || rec.WouldDeny != c.wouldDeny ||
			(rec.WouldDeny != "") != (rec.ObservedBy == "bundle") {
			t.Errorf("%s %s: rcode %s, record %s/%s would_deny %q by %q; want %s, %s/%s would_deny %q by bundle",
				c.qname, dns.TypeToString[c.qtype], dns.RcodeToString[resp.Rcode], rec.Decision, rec.Reason, rec.WouldDeny, rec.ObservedBy,
				dns.RcodeToString[c.rcode], c.decision, c.reason, c.wouldDeny)
		}
	}
}
