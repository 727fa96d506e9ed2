package dnstest

import (
	"testing"
	"time"

	"github.com/miekg/dns"
)

func ask(t *testing.T, s *Server, netw, name string, qtype uint16) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: netw, Timeout: 2 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	resp, _, err := c.Exchange(m, s.Addr())
	if err != nil {
		t.Fatalf("query %s over %s: %v", name, netw, err)
	}
	return resp
}

func TestServer(t *testing.T) {
	s := Start(t)
	s.Set("rebind.test", Entry{Answers: [][]string{{"rebind.test. 0 IN A 127.0.0.2"}, {"rebind.test. 0 IN A 169.254.169.254"}}})
	s.SetRR("alias.test", "alias.test. 60 IN CNAME target.test.")
	s.SetRR("target.test", "target.test. 60 IN A 127.0.0.3")
	s.Set("tc.test", Entry{Answers: [][]string{{"tc.test. 60 IN A 127.0.0.4"}}, TruncateUDP: true})
	s.Set("fail.test", Entry{Rcode: dns.RcodeServerFailure})

	var got []string
	for range 3 {
		r := ask(t, s, "udp", "rebind.test", dns.TypeA)
		got = append(got, r.Answer[0].(*dns.A).A.String())
	}
	if got[0] != "127.0.0.2" || got[1] != "169.254.169.254" || got[2] != "127.0.0.2" {
		t.Errorf("rebind.test answers = %v; want alternating", got)
	}
	if r := ask(t, s, "udp", "rebind.test", dns.TypeAAAA); len(r.Answer) != 0 || r.Rcode != dns.RcodeSuccess {
		t.Errorf("rebind.test AAAA = %v; want empty NOERROR", r)
	}
	if r := ask(t, s, "udp", "alias.test", dns.TypeA); len(r.Answer) != 2 {
		t.Errorf("alias.test answer = %v; want CNAME and its target's A", r.Answer)
	}
	if r := ask(t, s, "udp", "tc.test", dns.TypeA); !r.Truncated || len(r.Answer) != 0 {
		t.Errorf("tc.test over udp = %v; want empty truncated", r)
	}
	if r := ask(t, s, "tcp", "tc.test", dns.TypeA); r.Truncated || len(r.Answer) != 1 {
		t.Errorf("tc.test over tcp = %v; want one record", r)
	}
	if r := ask(t, s, "udp", "fail.test", dns.TypeA); r.Rcode != dns.RcodeServerFailure {
		t.Errorf("fail.test rcode = %s; want SERVFAIL", dns.RcodeToString[r.Rcode])
	}
	if r := ask(t, s, "udp", "nowhere.test", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Errorf("nowhere.test rcode = %s; want NXDOMAIN", dns.RcodeToString[r.Rcode])
	}
	if n := s.Queries("REBIND.test."); n != 4 {
		t.Errorf("Queries(rebind.test) = %d; want 4", n)
	}
}
