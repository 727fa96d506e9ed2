package dnsguard

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/egressd/egressd/policy"
)

// InternalConfig is the top-level `internal:` key: the non-public addresses
// sandboxes may reach (a model gateway, a tool simulator) and addresses they
// must never reach. Metadata addresses cannot be allowed. An empty list
// allows no non-public address.
type InternalConfig []InternalRule

// InternalRule is one `internal:` entry.
type InternalRule struct {
	// CIDR is an address or prefix, e.g. "10.20.0.0/16" or "fd12::7".
	CIDR string `yaml:"cidr"`
	// Ports the rule covers. An allow must list at least one; a deny with
	// no ports covers every port.
	Ports []uint16 `yaml:"ports"`
	// Action is allow or deny. A deny beats every allow, whatever their
	// order or prefix lengths.
	Action string `yaml:"action"`
}

// Validate checks the entries without I/O; errors name the entry's index.
func (c InternalConfig) Validate() error {
	_, _, err := compileInternal(c)
	return err
}

type internalRule struct {
	prefix netip.Prefix
	ports  []uint16 // nil: every port
}

func (r *internalRule) covers(a netip.Addr, port uint16) bool {
	if !r.prefix.Contains(a) {
		return false
	}
	if r.ports == nil {
		return true
	}
	for _, p := range r.ports {
		if p == port {
			return true
		}
	}
	return false
}

func compileInternal(c InternalConfig) (allow, deny []internalRule, err error) {
	for i, r := range c {
		p, perr := parseCIDR(r.CIDR)
		if perr != nil {
			return nil, nil, fmt.Errorf("[%d].cidr must be an address or prefix, got %q", i, r.CIDR)
		}
		for _, port := range r.Ports {
			if port == 0 {
				return nil, nil, fmt.Errorf("[%d].ports must be 1-65535, got 0", i)
			}
		}
		ir := internalRule{prefix: p, ports: r.Ports}
		switch r.Action {
		case "allow":
			if len(r.Ports) == 0 {
				return nil, nil, fmt.Errorf("[%d].ports must list at least one port for an allow", i)
			}
			if p.IsSingleIP() && Classify(p.Addr()) == Metadata {
				// The floor refuses it whatever this says: an allow that
				// could never take effect is a mistake to point out.
				return nil, nil, fmt.Errorf("[%d].cidr %q is a cloud metadata address, which no sandbox may reach "+
					"(refused as metadata_address whatever internal: allows): remove the entry", i, r.CIDR)
			}
			allow = append(allow, ir)
		case "deny":
			if len(r.Ports) == 0 {
				ir.ports = nil
			}
			deny = append(deny, ir)
		default:
			return nil, nil, fmt.Errorf("[%d].action must be allow or deny, got %q", i, r.Action)
		}
	}
	return allow, deny, nil
}

func parseCIDR(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			// Addresses are unmapped before matching, so rules must be too.
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("zone not allowed")
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// Floor is the address check nothing overrides: metadata never, explicit
// denies always, other non-public addresses only where `internal:` allows
// the address and port. The zero Floor has no internal rules.
type Floor struct {
	// rules is swapped whole by Update, so a check sees one table.
	rules atomic.Pointer[floorRules]
}

var noRules floorRules

type floorRules struct {
	allow, deny []internalRule
}

// NewFloor compiles the internal rules.
func NewFloor(internal InternalConfig) (*Floor, error) {
	f := &Floor{}
	if err := f.Update(internal); err != nil {
		return nil, err
	}
	return f, nil
}

// Update replaces the internal rules for every later check. On error the
// rules in force stay.
func (f *Floor) Update(internal InternalConfig) error {
	allow, deny, err := compileInternal(internal)
	if err != nil {
		return fmt.Errorf("internal%w", err)
	}
	f.rules.Store(&floorRules{allow: allow, deny: deny})
	return nil
}

// Check returns nil if a may be dialled on port, else a *policy.DenyError
// whose reason names the category (policy.ReasonMetadataAddress,
// policy.ReasonPrivateAddress, …) or the internal: rule that refused it
// (policy.ReasonInternalDenied, policy.ReasonInternalPortNotAllowed).
func (f *Floor) Check(a netip.Addr, port uint16) error {
	return f.check(a, port, true)
}

// checkAddr is the port-independent check a resolver answer must pass: the
// address may be dialled on some port.
func (f *Floor) checkAddr(a netip.Addr) error {
	return f.check(a, 0, false)
}

func (f *Floor) check(a netip.Addr, port uint16, withPort bool) error {
	if a.Zone() != "" {
		// A zone selects an interface: only link-local needs one, and
		// no rule can name it.
		return &policy.DenyError{Reason: policy.ReasonZonedAddress, Detail: a.String() + " has a zone"}
	}
	a = a.Unmap()
	cat := Classify(a)
	if cat == Metadata {
		return categoryDeny(a, cat)
	}
	embedded, hasEmbedded := embeddedV4(a)
	rules := f.rules.Load()
	if rules == nil {
		rules = &noRules
	}
	for i := range rules.deny {
		d := &rules.deny[i]
		// A deny without ports is checked even without a port; one with
		// ports only once the port is known.
		if !withPort && d.ports != nil {
			continue
		}
		if d.covers(a, port) || (hasEmbedded && d.covers(embedded, port)) {
			return &policy.DenyError{Reason: policy.ReasonInternalDenied, Detail: fmt.Sprintf("%s is denied by internal %s", a, d.prefix)}
		}
	}
	if cat == Public {
		return nil
	}
	inPrefix := false
	for i := range rules.allow {
		r := &rules.allow[i]
		if !r.prefix.Contains(a) {
			continue
		}
		inPrefix = true
		if !withPort || r.covers(a, port) {
			return nil
		}
	}
	if inPrefix {
		return &policy.DenyError{Reason: policy.ReasonInternalPortNotAllowed, Detail: fmt.Sprintf("%s is %s; port %d is not allowed by internal", a, cat, port)}
	}
	return categoryDeny(a, cat)
}

func categoryDeny(a netip.Addr, cat Category) error {
	return &policy.DenyError{Reason: cat.Reason(), Detail: a.String() + " is " + cat.String()}
}

// embeddedV4 returns the IPv4 address an embedding IPv6 form carries (the
// /96 layout for NAT64), so deny entries written for IPv4 catch it too.
func embeddedV4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() {
		return netip.Addr{}, false
	}
	hi, lo := v6(a)
	var x uint32
	switch {
	case hi == 0 && lo>>32 == 0 && lo > 1, hi == 0x0064ff9b00000000 && lo>>32 == 0, hi>>16 == 0x0064ff9b0001:
		x = uint32(lo)
	case hi>>48 == 0x2002:
		x = uint32(hi >> 16)
	case hi>>32 == 0x20010000:
		x = ^uint32(lo)
	default:
		return netip.Addr{}, false
	}
	return netip.AddrFrom4([4]byte{byte(x >> 24), byte(x >> 16), byte(x >> 8), byte(x)}), true
}

// metadataNames are host names that resolve to metadata services inside
// clouds and clusters; they are refused as names before any lookup.
var metadataNames = map[string]bool{
	"metadata":                     true,
	"metadata.google.internal":     true,
	"metadata.goog":                true,
	"metadata.azure.internal":      true,
	"metadata.tencentyun.com":      true,
	"metadata.platformequinix.com": true,
	"instance-data":                true,
	"instance-data.ec2.internal":   true,
}

// IsMetadataName reports whether name (lowercase, without the trailing dot)
// is a metadata service name or a subdomain of one (instance-data.*
// resolves to IMDS in every AWS region's internal zone).
func IsMetadataName(name string) bool {
	if metadataNames[name] {
		return true
	}
	return strings.HasPrefix(name, "instance-data.") && strings.HasSuffix(name, ".internal") ||
		strings.HasPrefix(name, "metadata.") && strings.HasSuffix(name, ".internal")
}

// CoversInternal reports whether every address of p is non-public and may
// be dialled on port only because an internal: allow entry names it: one
// allow entry with that port holds all of p, and no deny entry touches p.
// It is the load-time proof that a credential bound to p over plain HTTP
// stays inside the network.
func (f *Floor) CoversInternal(p netip.Prefix, port uint16) bool {
	p = p.Masked()
	first, last := p.Addr(), lastAddr(p)
	if Classify(first) == Public || Classify(last) == Public || Classify(first) == Metadata {
		return false
	}
	rules := f.rules.Load()
	if rules == nil {
		return false
	}
	for i := range rules.deny {
		d := &rules.deny[i]
		if d.prefix.Overlaps(p) && (d.ports == nil || slices.Contains(d.ports, port)) {
			return false
		}
	}
	for i := range rules.allow {
		r := &rules.allow[i]
		if r.prefix.Bits() <= p.Bits() && r.prefix.Contains(first) && slices.Contains(r.ports, port) {
			return true
		}
	}
	return false
}

// lastAddr is the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
