package policy

import (
	"encoding/binary"
	"net/netip"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// ConnectFacts are the facts of a CONNECT request: the tunnel's host and
// port, normalized exactly as an HTTP request's.
type ConnectFacts struct {
	// Host is lower-case ASCII or the canonical address of an IP literal.
	Host string `json:"host"`
	// IP is set when the host is an IP literal, in any spelling.
	IP netip.Addr `json:"ip,omitzero"`
	// IPObfuscated marks an IP literal spelled non-canonically.
	IPObfuscated bool `json:"ip_obfuscated"`
	// Port is the tunnel's port; CONNECT has no default.
	Port uint16 `json:"port"`
}

// ParseConnect computes the facts of a CONNECT request-target
// ("host:port" or "[v6]:port"). Any input it cannot read exactly is a
// *DenyError.
func ParseConnect(target string) (*ConnectFacts, error) {
	if len(target) > maxHost+8 {
		return nil, deny(ReasonHostTooLong, "", nil)
	}
	if strings.ContainsAny(target, "@/\\?#") {
		return nil, deny(ReasonMalformedURL, "CONNECT target must be host:port", nil)
	}
	h, p, hasPort := splitHostPort(target)
	if !hasPort {
		return nil, deny(ReasonMalformedPort, "CONNECT target needs a port", nil)
	}
	port, ok := parsePort(p)
	if !ok {
		return nil, deny(ReasonMalformedPort, "", nil)
	}
	hf, err := parseHost(h)
	if err != nil {
		return nil, err
	}
	return &ConnectFacts{Host: hf.name, IP: hf.ip, IPObfuscated: hf.obfuscated, Port: port}, nil
}

// Kind is KindConnect.
func (f *ConnectFacts) Kind() Kind { return KindConnect }

// AppendKey encodes every field AddTo puts in the input.
func (f *ConnectFacts) AppendKey(dst []byte) []byte {
	dst = appendStr(dst, f.Host)
	dst = binary.BigEndian.AppendUint16(dst, f.Port)
	return append(dst, b2u(f.IP.IsValid()), b2u(f.IPObfuscated))
}

// AddTo inserts the facts into the Rego input.
func (f *ConnectFacts) AddTo(in ast.Object) {
	in.Insert(termFlags, flagsTerm(0, f.IPObfuscated, false, false))
	addHost(in, f.Host, f.IP, f.Port)
}
