package dnsguard

import (
	"encoding/binary"
	"net/netip"
	"sort"

	"github.com/egressd/egressd/policy"
)

// Category is what an address is, for the floor: public, or the kind of
// special-purpose range it belongs to.
type Category uint8

// The categories. Metadata outranks everything; the rest are denied unless an
// `internal:` allow names the address and port.
const (
	Public Category = iota
	Loopback
	Private
	LinkLocal
	CGNAT
	ULA
	Multicast
	Unspecified
	Broadcast
	Documentation
	Benchmarking
	Reserved
	ThisNetwork
	Metadata
	numCategories
)

var categoryNames = [numCategories]string{
	"public", "loopback", "private", "link_local", "cgnat", "ula", "multicast",
	"unspecified", "broadcast", "documentation", "benchmarking", "reserved",
	"this_network", "metadata",
}

func (c Category) String() string {
	if c < numCategories {
		return categoryNames[c]
	}
	return "unknown"
}

// Reason is the stable deny reason for an address of this category, e.g.
// policy.ReasonMetadataAddress. Public has none: the floor never refuses it
// for its category.
func (c Category) Reason() policy.Reason {
	if c < numCategories {
		return categoryReasons[c]
	}
	return policy.ReasonUnknownAddress
}

var categoryReasons = [numCategories]policy.Reason{
	Loopback:      policy.ReasonLoopbackAddress,
	Private:       policy.ReasonPrivateAddress,
	LinkLocal:     policy.ReasonLinkLocalAddress,
	CGNAT:         policy.ReasonCGNATAddress,
	ULA:           policy.ReasonULAAddress,
	Multicast:     policy.ReasonMulticastAddress,
	Unspecified:   policy.ReasonUnspecifiedAddress,
	Broadcast:     policy.ReasonBroadcastAddress,
	Documentation: policy.ReasonDocumentationAddress,
	Benchmarking:  policy.ReasonBenchmarkingAddress,
	Reserved:      policy.ReasonReservedAddress,
	ThisNetwork:   policy.ReasonThisNetworkAddress,
	Metadata:      policy.ReasonMetadataAddress,
}

// metadataAddrs are cloud metadata endpoints, listed by address because
// several sit outside link-local (Azure's WireServer is a public address).
var metadataAddrs = []string{
	"169.254.169.254", // AWS, GCP, Azure IMDS, OpenStack, DigitalOcean, Oracle, Hetzner
	"169.254.169.253", // AWS VPC DNS
	"169.254.169.123", // AWS time sync
	"169.254.169.250", // AWS Outposts / Nitro legacy endpoint
	"169.254.170.2",   // AWS ECS task credentials
	"169.254.170.23",  // AWS EKS pod identity agent
	"169.254.0.23",    // Tencent Cloud
	"169.254.42.42",   // Scaleway
	"100.100.100.200", // Alibaba Cloud
	"192.0.0.192",     // Oracle Cloud (OCI legacy)
	"168.63.129.16",   // Azure WireServer
	"fd00:ec2::254",   // AWS IMDS over IPv6
	"fd00:ec2::253",   // AWS VPC DNS over IPv6
	"fd00:ec2::123",   // AWS time sync over IPv6
	"fd00:ec2::23",    // AWS EKS pod identity agent over IPv6
	"fd20:ce::254",    // GCP metadata over IPv6
	"fd00:42::42",     // Scaleway over IPv6
}

// ranges4 is the IPv4 special-purpose registry (IANA, RFC 6890 and
// successors). Ranges the registry marks globally reachable (AS112, AMT) are
// left out: they are public.
var ranges4 = []struct {
	prefix string
	cat    Category
}{
	{"0.0.0.0/8", ThisNetwork},
	{"0.0.0.0/32", Unspecified},
	{"10.0.0.0/8", Private},
	{"100.64.0.0/10", CGNAT},
	{"127.0.0.0/8", Loopback},
	{"169.254.0.0/16", LinkLocal},
	{"172.16.0.0/12", Private},
	{"192.0.0.0/24", Reserved}, // IETF protocol assignments, DS-Lite
	{"192.0.2.0/24", Documentation},
	{"192.88.99.0/24", Reserved}, // deprecated 6to4 relay anycast
	{"192.168.0.0/16", Private},
	{"198.18.0.0/15", Benchmarking},
	{"198.51.100.0/24", Documentation},
	{"203.0.113.0/24", Documentation},
	{"224.0.0.0/4", Multicast},
	{"240.0.0.0/4", Reserved},
	{"255.255.255.255/32", Broadcast},
}

// ranges6 is the IPv6 special-purpose registry. The IPv4-embedding prefixes
// are not here: embedded4 handles them first.
var ranges6 = []struct {
	prefix string
	cat    Category
}{
	{"::/128", Unspecified},
	{"::1/128", Loopback},
	{"100::/64", Reserved},       // discard-only
	{"100:0:0:1::/64", Reserved}, // dummy prefix (RFC 9780)
	{"2001::/23", Reserved},      // IETF protocol assignments (Teredo is handled before)
	{"2001:2::/48", Benchmarking},
	{"2001:db8::/32", Documentation},
	{"3fff::/20", Documentation},
	{"5f00::/16", Reserved}, // SRv6 SIDs
	{"fc00::/7", ULA},
	{"fe80::/10", LinkLocal},
	{"fec0::/10", Private}, // deprecated site-local
	{"ff00::/8", Multicast},
}

type entry4 struct {
	base, mask uint32
	cat        Category
}

type entry6 struct {
	hi, lo         uint64
	maskHi, maskLo uint64
	cat            Category
}

// The compiled tables, most specific prefix first so the first match wins.
var (
	meta4  []uint32
	meta6  [][2]uint64
	table4 []entry4
	table6 []entry6
	// byOctet4 holds, per first octet, the IPv4 entries (metadata
	// addresses included) that can match, most specific first: most
	// addresses are classified after a handful of comparisons or none.
	byOctet4 [256][]entry4
	// byTop6 is the same for IPv6, by the first byte.
	byTop6 [256][]entry6
)

func init() {
	for _, s := range metadataAddrs {
		a := netip.MustParseAddr(s)
		if a.Is4() {
			meta4 = append(meta4, v4(a))
		} else {
			hi, lo := v6(a)
			meta6 = append(meta6, [2]uint64{hi, lo})
		}
	}
	for _, r := range ranges4 {
		p := netip.MustParsePrefix(r.prefix)
		mask := ^uint32(0) << (32 - p.Bits())
		if p.Bits() == 0 {
			mask = 0
		}
		table4 = append(table4, entry4{v4(p.Addr()), mask, r.cat})
	}
	for _, m := range meta4 {
		table4 = append(table4, entry4{m, ^uint32(0), Metadata})
	}
	sort.SliceStable(table4, func(i, j int) bool { return table4[i].mask > table4[j].mask })
	for _, e := range table4 {
		for o := e.base >> 24; o <= (e.base|^e.mask)>>24; o++ {
			byOctet4[o] = append(byOctet4[o], e)
		}
	}
	for _, r := range ranges6 {
		p := netip.MustParsePrefix(r.prefix)
		hi, lo := v6(p.Addr())
		mh, ml := mask128(p.Bits())
		table6 = append(table6, entry6{hi, lo, mh, ml, r.cat})
	}
	for _, m := range meta6 {
		table6 = append(table6, entry6{m[0], m[1], ^uint64(0), ^uint64(0), Metadata})
	}
	sort.SliceStable(table6, func(i, j int) bool {
		a, b := table6[i], table6[j]
		return a.maskHi > b.maskHi || (a.maskHi == b.maskHi && a.maskLo > b.maskLo)
	})
	for _, e := range table6 {
		for o := e.hi >> 56; o <= (e.hi|^e.maskHi)>>56; o++ {
			byTop6[o] = append(byTop6[o], e)
		}
	}
}

func mask128(bits int) (hi, lo uint64) {
	switch {
	case bits == 0:
		return 0, 0
	case bits <= 64:
		return ^uint64(0) << (64 - bits), 0
	case bits == 128:
		return ^uint64(0), ^uint64(0)
	}
	return ^uint64(0), ^uint64(0) << (128 - bits)
}

func v4(a netip.Addr) uint32 {
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

func v6(a netip.Addr) (hi, lo uint64) {
	b := a.As16()
	return binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
}

// Classify returns the category of a. IPv4-embedding IPv6 forms (mapped,
// compatible, NAT64, 6to4, Teredo) are classified by the IPv4 address they
// carry, the most dangerous candidate winning where a prefix admits several
// layouts. An invalid address is Reserved. It does not allocate.
func Classify(a netip.Addr) Category {
	if !a.IsValid() {
		return Reserved
	}
	if a.Is4() {
		return classify4(v4(a))
	}
	hi, lo := v6(a)
	// No metadata address is an embedding form, so the order of these two
	// steps does not matter.
	if c, ok := classifyEmbedded(hi, lo); ok {
		return c
	}
	for _, e := range byTop6[hi>>56] {
		if hi&e.maskHi == e.hi && lo&e.maskLo == e.lo {
			return e.cat
		}
	}
	// Outside 2000::/3 nothing is allocated for global unicast.
	if hi>>61 != 1 {
		return Reserved
	}
	return Public
}

func classify4(x uint32) Category {
	for _, e := range byOctet4[x>>24] {
		if x&e.mask == e.base {
			return e.cat
		}
	}
	return Public
}

// classifyEmbedded classifies the IPv4-embedding forms; ok is false when a
// is not one of them. ::/128 and ::1 are excluded from the compatible form so
// they keep their own IPv6 meaning.
func classifyEmbedded(hi, lo uint64) (Category, bool) {
	switch {
	case hi == 0 && lo>>32 == 0xffff: // ::ffff:0:0/96 mapped
		return classify4(uint32(lo)), true
	case hi == 0 && lo>>32 == 0 && lo > 1: // ::/96 compatible (deprecated)
		return classify4(uint32(lo)), true
	case hi == 0x0064ff9b00000000 && lo>>32 == 0: // 64:ff9b::/96 NAT64
		return classify4(uint32(lo)), true
	case hi>>16 == 0x0064ff9b0001: // 64:ff9b:1::/48 local-use NAT64
		return classifyLocalNAT64(hi, lo), true
	case hi>>48 == 0x2002: // 2002::/16 6to4
		return classify4(uint32(hi >> 16)), true
	case hi>>32 == 0x20010000: // 2001::/32 Teredo: client address obfuscated
		return classify4(^uint32(lo)), true
	}
	return 0, false
}

// classifyLocalNAT64 reads 64:ff9b:1::/48 in every RFC 6052 layout the
// operator may have chosen inside it (/48, /56, /64 when their suffix bits are
// zero, and always /96). The address is metadata if any reading is; else the
// first non-public reading, most specific layout first; public only when
// every reading is.
func classifyLocalNAT64(hi, lo uint64) Category {
	readings := [4]struct {
		ok bool
		x  uint32
	}{
		{lo&0xffffffffff == 0, uint32(hi)<<16 | uint32(lo>>40)&0xffff}, // /48: bits 48-63, 72-87
		{lo&0xffffffff == 0, uint32(hi)<<24 | uint32(lo>>32)&0xffffff}, // /56: bits 56-63, 72-95
		{lo&0xffffff == 0, uint32(lo >> 24)},                           // /64: bits 72-103
		{true, uint32(lo)},                                             // /96
	}
	w := Public
	for _, r := range readings {
		if !r.ok {
			continue
		}
		c := classify4(r.x)
		if c == Metadata {
			return Metadata
		}
		if w == Public {
			w = c
		}
	}
	return w
}
