package e2e

import (
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/dnsguard/dnstest"
	"github.com/egressd/egressd/internal/testport"
	"github.com/egressd/egressd/internal/testwait"
)

// TestDNSListener drives `egressd serve` with dns.listen set: the sandbox
// resolver answers only names the policy allows, refuses the rest without
// forwarding them, refuses forbidden answers and tunnelling record types, and
// audits each decision.
func TestDNSListener(t *testing.T) {
	up := dnstest.Start(t)
	up.SetRR("pkg.example.test", "pkg.example.test. 300 IN A 93.184.216.34")
	up.SetRR("inside.example.test", "inside.example.test. 300 IN A 10.0.0.5")
	up.SetRR("evil.example.test", "evil.example.test. 300 IN A 93.184.216.35")
	held := ReservePort(t)
	listen := held.Addr()
	e := Start(t, Options{
		Hold:      []*testport.Reservation{held},
		DNS:       up.Addr(),
		DNSListen: listen,
		PolicyDir: WritePolicy(t, []Rule{
			{ID: "pkg", Hosts: []string{"pkg.example.test", "inside.example.test"}, Ports: []int{443}},
		}),
	})
	waitDNS(t, listen)

	tests := []struct {
		name   string
		qname  string
		qtype  uint16
		rcode  int
		answer string
	}{
		{"allowed name", "pkg.example.test.", dns.TypeA, dns.RcodeSuccess, "93.184.216.34"},
		{"name no rule matches", "evil.example.test.", dns.TypeA, dns.RcodeRefused, ""},
		{"allowed name with a private answer", "inside.example.test.", dns.TypeA, dns.RcodeRefused, ""},
		{"tunnelling record type", "pkg.example.test.", dns.TypeTXT, dns.RcodeRefused, ""},
		{"metadata name", "metadata.google.internal.", dns.TypeA, dns.RcodeRefused, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, netw := range []string{"udp", "tcp"} {
				m := new(dns.Msg).SetQuestion(tt.qname, tt.qtype)
				c := &dns.Client{Net: netw, Timeout: 5 * time.Second}
				r, _, err := c.Exchange(m, listen)
				if err != nil {
					t.Fatalf("%s exchange %s: %v", netw, tt.qname, err)
				}
				if r.Rcode != tt.rcode {
					t.Fatalf("%s %s %s rcode = %s; want %s", netw, tt.qname, dns.TypeToString[tt.qtype],
						dns.RcodeToString[r.Rcode], dns.RcodeToString[tt.rcode])
				}
				if tt.answer != "" && (len(r.Answer) != 1 || !strings.HasSuffix(r.Answer[0].String(), tt.answer)) {
					t.Errorf("%s %s answer = %v; want %s", netw, tt.qname, r.Answer, tt.answer)
				}
			}
		})
	}
	// Counted by reason like the proxy's decisions (issue 17 item 6): each
	// case once over UDP and once over TCP.
	m := e.Metrics(t)
	for series, want := range map[string]float64{
		`egressd_decisions_total{decision="allow",kind="dns",reason="allowed"}`:      2,
		`egressd_decisions_total{decision="deny",kind="dns",reason="metadata_name"}`: 2,
	} {
		if got := metricValue(t, m, series); got != want {
			t.Errorf("%s = %v; want %v", series, got, want)
		}
	}
	if n := up.Queries("evil.example.test"); n != 0 {
		t.Errorf("upstream saw %d queries for a refused name; want 0 (refused names are never forwarded)", n)
	}

	dig, err := exec.LookPath("dig")
	if err != nil {
		t.Fatalf("dig is required (Debian package dnsutils; .ci/run installs it): %v", err)
	}
	host, port := splitHostPort(t, listen)
	out, err := exec.Command(dig, "@"+host, "-p", port, "+short", "+time=5", "+tries=1", "pkg.example.test", "A").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "93.184.216.34" {
		t.Errorf("dig pkg.example.test = %q, %v; want 93.184.216.34", out, err)
	}
	out, _ = exec.Command(dig, "@"+host, "-p", port, "+time=5", "+tries=1", "evil.example.test", "A").CombinedOutput()
	if !strings.Contains(string(out), "status: REFUSED") {
		t.Errorf("dig evil.example.test = %q; want status REFUSED", out)
	}

	e.WaitRecords(t, "dns allow and deny records", func(r audit.Record) bool {
		return r.Kind == "dns" && r.Name == "evil.example.test" && r.Decision == "deny" && r.Reason != ""
	})
	recs := e.WaitRecords(t, "dns allow record", func(r audit.Record) bool {
		return r.Kind == "dns" && r.Name == "pkg.example.test" && r.Decision == "allow"
	})
	if recs[0].Policy == "" {
		t.Errorf("dns record %+v has no policy digest", recs[0])
	}
	VerifyAudit(t, e)
}

// waitDNS waits until the sandbox resolver answers on UDP: /readyz covers
// the proxy, and the DNS listener starts beside it.
func waitDNS(t *testing.T, addr string) {
	t.Helper()
	c := &dns.Client{Net: "udp", Timeout: 500 * time.Millisecond}
	testwait.For(t, "the dns listener "+addr+" to answer", 10*time.Second, func() error {
		_, _, err := c.Exchange(new(dns.Msg).SetQuestion("probe.invalid.", dns.TypeA), addr)
		return err
	})
}

func splitHostPort(t *testing.T, addr string) (string, string) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("split %q: %v", addr, err)
	}
	return host, port
}
