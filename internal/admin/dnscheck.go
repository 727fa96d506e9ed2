package admin

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/miekg/dns"
)

// DNSCheck is ready when at least one of the upstream resolvers answers a
// query at all (any rcode): the proxy cannot resolve a name without one.
// With no upstreams the nameservers of /etc/resolv.conf are asked, as the
// resolver does.
func DNSCheck(upstreams []string) Check {
	return Check{Name: "dns", Fn: func(ctx context.Context) error {
		ups := upstreams
		if len(ups) == 0 {
			cc, err := dns.ClientConfigFromFile("/etc/resolv.conf")
			if err != nil {
				return fmt.Errorf("no dns.upstreams: %w", err)
			}
			for _, s := range cc.Servers {
				ups = append(ups, net.JoinHostPort(s, cc.Port))
			}
		}
		m := new(dns.Msg)
		m.SetQuestion(".", dns.TypeNS)
		c := &dns.Client{Net: "udp"}
		var errs []error
		for _, up := range ups {
			if _, _, err := c.ExchangeContext(ctx, m, up); err != nil {
				errs = append(errs, err)
				continue
			}
			return nil
		}
		if len(errs) == 0 {
			return errors.New("no upstream resolvers")
		}
		return fmt.Errorf("no upstream resolver answers: %w", errors.Join(errs...))
	}}
}
