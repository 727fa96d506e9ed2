package dnsguard

import (
	"testing"

	"github.com/miekg/dns"
)

// BenchmarkServerCachedAnswer measures the sandbox-facing server answering
// an allowed, cached name over UDP on loopback (real policy engine with its
// decision cache, audit records built and handed to a discarding
// appender), next to the dnstest upstream answering the same question
// itself in the same run: the difference is what policy, floor, audit and
// the server add.
func BenchmarkServerCachedAnswer(b *testing.B) {
	ts := startServerWith(b, testEngine(b), func(c *Config) { c.RateLimit, c.Burst = 1e9, 1<<20 })
	ts.audit.SetDiscard(true)
	for _, target := range []struct{ name, addr string }{
		{"egressd", ts.addr},
		{"dnstest_upstream", ts.upstream.Addr()},
	} {
		b.Run(target.name, func(b *testing.B) {
			c := &dns.Client{Net: "udp"}
			conn, err := c.Dial(target.addr)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			m := new(dns.Msg)
			m.SetQuestion("svc.test.", dns.TypeA)
			b.ReportAllocs()
			for b.Loop() {
				resp, _, err := c.ExchangeWithConn(m, conn)
				if err != nil {
					b.Fatal(err)
				}
				if len(resp.Answer) != 1 {
					b.Fatalf("answer = %v; want one record", resp.Answer)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "queries/s")
		})
	}
}
