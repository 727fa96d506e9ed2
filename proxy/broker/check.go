package broker

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/egressd/egressd/policy"
)

// InternalFloor is what the cleartext check needs of the address floor
// (*dnsguard.Floor).
type InternalFloor interface {
	CoversInternal(p netip.Prefix, port uint16) bool
}

// CheckRules refuses a bundle whose credential rules the config cannot
// serve safely; serve, reload and check run it before a bundle decides:
//
//   - every secret a rule names is in the config's secrets;
//   - no rule would send a secret in cleartext to a public address. A rule
//     with "inspect": true is accepted (its secrets go inside the TLS of
//     inspected requests; a plain-HTTP request it matches is refused
//     credential_cleartext unless it is dialled to an internal address).
//     Any other rule must have every host an IP address or CIDR that an
//     internal: allow entry holds whole, for every port of the rule (and
//     no internal: deny touches): a name may resolve to a public address,
//     so a name needs inspect.
func CheckRules(rules []policy.CredentialRule, secrets Config, floor InternalFloor) error {
	names := make(map[string]bool, len(secrets))
	for _, s := range secrets {
		names[s.Name] = true
	}
	for _, r := range rules {
		for j, c := range r.Credentials {
			if !names[c.Secret] {
				return fmt.Errorf("rules[%d].credentials[%d].secret %q is not in the config's secrets: (rule %q): add it there or fix the name",
					r.Index, j, c.Secret, r.ID)
			}
		}
		if r.Inspect {
			continue
		}
		for _, h := range r.Hosts {
			p, ok := hostPrefix(h)
			for _, port := range r.Ports {
				if !ok || !floor.CoversInternal(p, uint16(port)) {
					return fmt.Errorf("rules[%d] (rule %q) binds credentials but would send them in cleartext: host %q port %d is not "+
						"an address an internal: allow entry holds for that port; set \"inspect\": true so they travel inside TLS, "+
						"or name the internal address", r.Index, r.ID, h, port)
				}
			}
		}
	}
	return nil
}

// hostPrefix reads a rule host that is an address or CIDR.
func hostPrefix(h string) (netip.Prefix, bool) {
	if strings.Contains(h, "/") {
		p, err := netip.ParsePrefix(h)
		return p, err == nil
	}
	a, err := netip.ParseAddr(h)
	if err != nil {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, a.BitLen()), true
}
