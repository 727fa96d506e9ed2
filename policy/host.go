package policy

import (
	"errors"
	"net/netip"
	"strings"

	"golang.org/x/net/idna"

	"github.com/egressd/egressd/internal/hostname"
)

// Length caps on untrusted input (RFC 1035 for names; the path and target
// caps are egressd's own bounds on what a rule ever needs to see).
const (
	maxHost   = 253
	maxPath   = 8 << 10
	maxTarget = 16 << 10
)

// hostFacts is a host normalized for matching.
type hostFacts struct {
	name       string     // lower-case ASCII name, or the canonical IP
	ip         netip.Addr // valid when the host is an IP literal
	obfuscated bool       // an IP spelled some other way than canonically
}

var errHostShape = errors.New("not a valid host name")

// parseHost normalizes the host part of an authority (brackets included
// for IPv6). Anything it cannot read exactly is a *DenyError: a host that
// two parsers could read differently must never reach a rule.
func parseHost(raw string) (hostFacts, error) {
	if raw == "" {
		return hostFacts{}, deny(ReasonMalformedHost, "empty host", nil)
	}
	if len(raw) > maxHost+1 {
		return hostFacts{}, deny(ReasonHostTooLong, "", nil)
	}
	if raw[0] == '[' {
		if raw[len(raw)-1] != ']' {
			return hostFacts{}, deny(ReasonMalformedHost, "unclosed IPv6 bracket", nil)
		}
		a, err := netip.ParseAddr(raw[1 : len(raw)-1])
		if err != nil || !a.Is6() || a.Zone() != "" {
			return hostFacts{}, deny(ReasonMalformedHost, "bad IPv6 literal", err)
		}
		if a.Is4In6() {
			// "[::ffff:127.0.0.1]" is an IPv4 address in disguise: match and
			// refuse it as the address it reaches.
			a = a.Unmap()
			return hostFacts{name: a.String(), ip: a, obfuscated: true}, nil
		}
		return hostFacts{name: a.String(), ip: a}, nil
	}
	h := raw
	mapped := false
	if !isASCII(h) {
		// IDNA mapping also folds full-width digits and dots, so the result
		// may turn out to be an IP spelled in disguise.
		a, err := idna.Lookup.ToASCII(h)
		if err != nil {
			return hostFacts{}, deny(ReasonMalformedHost, "invalid IDN", err)
		}
		h, mapped = a, true
	}
	h = strings.TrimSuffix(h, ".")
	if h == "" {
		return hostFacts{}, deny(ReasonMalformedHost, "empty host", nil)
	}
	if endsInNumber(h) {
		a, canonical, ok := parseIPv4(h)
		if !ok {
			return hostFacts{}, deny(ReasonMalformedHost, "bad IPv4 literal", nil)
		}
		return hostFacts{name: a.String(), ip: a, obfuscated: !canonical || mapped || raw != h}, nil
	}
	n, err := normalizeName(h)
	if err != nil {
		return hostFacts{}, deny(ReasonMalformedHost, "", err)
	}
	if len(n) > maxHost {
		return hostFacts{}, deny(ReasonHostTooLong, "", nil)
	}
	return hostFacts{name: n}, nil
}

// normalizeName lower-cases an ASCII host name and checks its labels (see
// internal/hostname); labels in punycode must decode.
func normalizeName(h string) (string, error) {
	n, fault := hostname.Normalize(h)
	if fault != hostname.OK {
		return "", errHostShape
	}
	if strings.HasPrefix(n, "xn--") || strings.Contains(n, ".xn--") {
		if _, err := idna.Lookup.ToUnicode(n); err != nil {
			return "", err
		}
	}
	return n, nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// endsInNumber reports whether the WHATWG URL parser would read h as an
// IPv4 address: its last label is decimal digits or 0x-prefixed hex.
// Browsers and curl then resolve it as an address, so must we.
func endsInNumber(h string) bool {
	last := h[strings.LastIndexByte(h, '.')+1:]
	if last == "" {
		return false
	}
	if len(last) >= 2 && last[0] == '0' && (last[1]|0x20) == 'x' {
		for i := 2; i < len(last); i++ {
			if !isHex(last[i]) {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(last); i++ {
		if last[i] < '0' || last[i] > '9' {
			return false
		}
	}
	return true
}

// parseIPv4 reads the WHATWG IPv4 forms: one to four parts, each decimal,
// octal (leading 0) or hex (0x), the last part filling the remaining bytes.
// canonical is true only for four plain decimal parts without leading zeros.
func parseIPv4(h string) (a netip.Addr, canonical, ok bool) {
	var parts [4]uint64
	n := 0
	canonical = true
	for rest := h; ; {
		if n == 4 {
			return netip.Addr{}, false, false
		}
		seg := rest
		dot := strings.IndexByte(rest, '.')
		if dot >= 0 {
			seg, rest = rest[:dot], rest[dot+1:]
		}
		v, plain, ok := parseIPv4Part(seg)
		if !ok {
			return netip.Addr{}, false, false
		}
		canonical = canonical && plain
		parts[n] = v
		n++
		if dot < 0 {
			break
		}
	}
	canonical = canonical && n == 4
	for i := 0; i < n-1; i++ {
		if parts[i] > 255 {
			return netip.Addr{}, false, false
		}
	}
	last := parts[n-1]
	if last >= 1<<(8*(5-n)) {
		return netip.Addr{}, false, false
	}
	v := last
	for i := 0; i < n-1; i++ {
		v |= parts[i] << (8 * (3 - i))
	}
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), canonical, true
}

// parseIPv4Part parses one part; plain is true for decimal without a
// leading zero. Values are capped well above 2^32 to avoid overflow.
func parseIPv4Part(s string) (v uint64, plain, ok bool) {
	if s == "" {
		return 0, false, false
	}
	base := uint64(10)
	plain = true
	switch {
	case len(s) >= 2 && s[0] == '0' && (s[1]|0x20) == 'x':
		base, s, plain = 16, s[2:], false
		if s == "" {
			return 0, false, true
		}
	case len(s) >= 2 && s[0] == '0':
		base, s, plain = 8, s[1:], false
	}
	for i := 0; i < len(s); i++ {
		d, ok := digitVal(s[i])
		if !ok || d >= base {
			return 0, false, false
		}
		v = v*base + d
		if v > 1<<40 {
			return 0, false, false
		}
	}
	return v, plain, true
}

func digitVal(c byte) (uint64, bool) {
	switch {
	case '0' <= c && c <= '9':
		return uint64(c - '0'), true
	case 'a' <= c && c <= 'f':
		return uint64(c-'a') + 10, true
	case 'A' <= c && c <= 'F':
		return uint64(c-'A') + 10, true
	}
	return 0, false
}

func isHex(c byte) bool {
	_, ok := digitVal(c)
	return ok
}

// parsePort reads a decimal port 1-65535.
func parsePort(s string) (uint16, bool) {
	if s == "" || len(s) > 5 {
		return 0, false
	}
	v := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		v = v*10 + int(s[i]-'0')
	}
	if v < 1 || v > 65535 {
		return 0, false
	}
	return uint16(v), true
}

// splitHostPort splits "host:port", "[v6]:port", "host" or "[v6]". An
// unbracketed IPv6 address is not a host.
func splitHostPort(s string) (host, port string, hasPort bool) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return s, "", false
		}
		if end == len(s)-1 {
			return s, "", false
		}
		if s[end+1] != ':' {
			return s, "", false
		}
		return s[:end+1], s[end+2:], true
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+1:], true
}

func deny(reason Reason, detail string, err error) *DenyError {
	return &DenyError{Reason: reason, Detail: detail, Err: err}
}
