package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/dnsguard/dnstest"
	"github.com/egressd/egressd/internal/testport"
)

// TestDNSIdentifiesByAddress (issue 25 item 1) drives `egressd serve`
// with dns.listen set and identities: a DNS query carries no credentials,
// so only an identity's sources can name its client. With tokens alone
// serve warns at start and refuses every name unknown_client, allowed
// ones included; with the client's range in sources (as the Kubernetes
// example maps its sandboxes' pod CIDR) the allowed name is answered.
func TestDNSIdentifiesByAddress(t *testing.T) {
	sum := sha256.Sum256([]byte("agent-1-demo-token"))
	const warning = "no identity lists sources"
	tests := []struct {
		name   string
		ids    string
		warn   bool
		rcode  int
		reason string
	}{
		{"token only", "identities:\n  - id: agent-1\n    token_sha256: " + hex.EncodeToString(sum[:]) + "\n",
			true, dns.RcodeRefused, "unknown_client"},
		{"sources cover the client", "identities:\n  - id: agent-1\n    token_sha256: " + hex.EncodeToString(sum[:]) +
			"\n    sources: [127.0.0.0/8]\n", false, dns.RcodeSuccess, "allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := dnstest.Start(t)
			up.SetRR("pkg.example.test", "pkg.example.test. 300 IN A 93.184.216.34")
			held := ReservePort(t)
			listen := held.Addr()
			e := Start(t, Options{
				Hold:      []*testport.Reservation{held},
				DNS:       up.Addr(),
				DNSListen: listen,
				YAML:      tt.ids,
				PolicyDir: WritePolicy(t, []Rule{{ID: "pkg", Hosts: []string{"pkg.example.test"}, Ports: []int{443}}}),
			})
			waitDNS(t, listen)
			if got := strings.Contains(e.Log(), warning); got != tt.warn {
				t.Errorf("serve log has %q: %v; want %v\n%s", warning, got, tt.warn, e.Log())
			}
			c := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
			r, _, err := c.Exchange(new(dns.Msg).SetQuestion("pkg.example.test.", dns.TypeA), listen)
			if err != nil {
				t.Fatalf("exchange pkg.example.test: %v", err)
			}
			if r.Rcode != tt.rcode {
				t.Errorf("pkg.example.test rcode = %s; want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[tt.rcode])
			}
			e.WaitRecords(t, "the query's record, reason "+tt.reason, func(rec audit.Record) bool {
				return rec.Kind == audit.KindDNS && rec.Name == "pkg.example.test" && rec.Reason == tt.reason
			})
		})
	}
}
