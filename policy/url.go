package policy

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// URLFacts are the facts of an HTTP request or a redirect target. Every
// field is normalized so that one destination has one spelling.
type URLFacts struct {
	kind Kind
	// Method is the request method as sent (methods are case-sensitive).
	Method string `json:"method"`
	// Scheme is "http" or "https".
	Scheme string `json:"scheme"`
	// Host is lower-case ASCII (IDNA applied, trailing dot removed), or the
	// canonical address of an IP literal (IPv6 without brackets).
	Host string `json:"host"`
	// IP is set when the host is an IP literal, in any spelling.
	IP netip.Addr `json:"ip,omitzero"`
	// IPObfuscated marks an IP literal spelled non-canonically (2130706433,
	// 0177.0.0.1, 0x7f.1, 127.1, full-width digits, …).
	IPObfuscated bool `json:"ip_obfuscated"`
	// Port is the explicit port or the scheme's default.
	Port uint16 `json:"port"`
	// Path is the path exactly as sent; it is what goes upstream.
	Path string `json:"path"`
	// PathDecoded is Path percent-decoded once; rules match it.
	PathDecoded string `json:"path_decoded"`
	// PathFlags are the refused spellings found in Path.
	PathFlags PathFlags `json:"path_flags"`
	// Query is the raw query, kept for the audit record; rules do not see
	// it, so it is not part of the decision key.
	Query string `json:"query,omitempty"`
	// Userinfo marks credentials in the URL ("user:pass@host").
	Userinfo bool `json:"userinfo"`
	// HostMismatch marks a Host header naming another host or port.
	HostMismatch bool `json:"host_mismatch"`
	// HasBody says the request carries a body; Body is what it says,
	// set only when a rule may decide on it (PreDial reads it then).
	HasBody bool       `json:"-"`
	Body    *BodyFacts `json:"body,omitempty"`
}

// ParseHTTP computes the facts of a proxied request from its method, its
// request-target (absolute-form "http://host/path", or origin-form "/path"
// with the host taken from hostHeader) and its Host header. kind is
// KindHTTP or KindRedirect (target is then the absolute Location). Any
// input it cannot read exactly is a *DenyError.
func ParseHTTP(kind Kind, method, target, hostHeader string) (*URLFacts, error) {
	if kind != KindHTTP && kind != KindRedirect {
		return nil, deny(ReasonMalformedURL, "kind must be http or redirect, got "+kind.String(), nil)
	}
	if len(target) > maxTarget {
		return nil, deny(ReasonTargetTooLong, "", nil)
	}
	if method == "" || len(method) > 32 || !isToken(method) {
		return nil, deny(ReasonMalformedMethod, "", nil)
	}
	if target == "" || strings.IndexByte(target, '#') >= 0 {
		return nil, deny(ReasonMalformedURL, "empty target or fragment", nil)
	}
	f := &URLFacts{kind: kind, Method: method}
	var authority, rest string
	if target[0] == '/' {
		if hostHeader == "" {
			return nil, deny(ReasonMalformedURL, "origin-form target without Host", nil)
		}
		f.Scheme, authority, rest = "http", hostHeader, target
	} else {
		i := strings.Index(target, "://")
		if i <= 0 {
			return nil, deny(ReasonMalformedURL, "target is neither absolute nor origin-form", nil)
		}
		switch strings.ToLower(target[:i]) {
		case "http":
			f.Scheme = "http"
		case "https":
			f.Scheme = "https"
		default:
			return nil, deny(ReasonUnsupportedScheme, "", nil)
		}
		authority = target[i+3:]
		if j := strings.IndexAny(authority, "/?"); j >= 0 {
			authority, rest = authority[:j], authority[j:]
		}
	}
	if strings.IndexByte(authority, '\\') >= 0 {
		// WHATWG parsers read "\" as "/" in http(s) URLs: the host would
		// end there for them but not for us.
		return nil, deny(ReasonMalformedHost, "backslash in authority", nil)
	}
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		f.Userinfo = true
		authority = authority[at+1:]
	}
	hf, port, err := parseAuthority(authority, f.Scheme)
	if err != nil {
		return nil, err
	}
	f.Host, f.IP, f.IPObfuscated, f.Port = hf.name, hf.ip, hf.obfuscated, port
	path := rest
	if q := strings.IndexByte(rest, '?'); q >= 0 {
		path, f.Query = rest[:q], rest[q+1:]
	}
	if path == "" {
		path = "/"
	}
	f.Path = path
	if f.PathDecoded, f.PathFlags, err = parsePath(path); err != nil {
		return nil, err
	}
	if hostHeader != "" && target[0] != '/' {
		hh, hp, err := parseAuthority(hostHeader, f.Scheme)
		f.HostMismatch = err != nil || hh.name != f.Host || hp != f.Port
	}
	return f, nil
}

// CheckH2Path refuses an h2 :path that is not an RFC 3986 path-absolute
// with an optional query (RFC 9113 section 8.3.1). h2 frames the field by
// length, so unlike an HTTP/1.1 request line it can carry a space, a
// control byte or any other byte a request-target cannot hold, and the
// proxy would write that as it is into the request line it sends upstream,
// where a space ends the target: such a request is malformed (a
// *DenyError, malformed_url, naming the byte).
func CheckH2Path(p string) error {
	if p == "" || p[0] != '/' {
		return deny(ReasonMalformedURL, "h2 :path is not an absolute path", nil)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~!$&'()*+,;=:@/?", c) >= 0:
		case c == '%' && i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2]):
			i += 2
		default:
			return deny(ReasonMalformedURL, fmt.Sprintf("byte %#02x at %d of the h2 :path is not allowed in a request-target", c, i), nil)
		}
	}
	return nil
}

// parseAuthority reads "host[:port]" with the scheme's default port.
func parseAuthority(a, scheme string) (hostFacts, uint16, error) {
	h, p, hasPort := splitHostPort(a)
	port := uint16(80)
	if scheme == "https" {
		port = 443
	}
	if hasPort && p != "" {
		var ok bool
		if port, ok = parsePort(p); !ok {
			return hostFacts{}, 0, deny(ReasonMalformedPort, "", nil)
		}
	}
	hf, err := parseHost(h)
	return hf, port, err
}

// Kind is KindHTTP or KindRedirect.
func (f *URLFacts) Kind() Kind { return f.kind }

// AppendKey encodes every field AddTo puts in the input.
func (f *URLFacts) AppendKey(dst []byte) []byte {
	dst = appendStr(dst, f.Method)
	dst = appendStr(dst, f.Scheme)
	dst = appendStr(dst, f.Host)
	dst = binary.BigEndian.AppendUint16(dst, f.Port)
	dst = binary.BigEndian.AppendUint16(dst, uint16(f.PathFlags))
	dst = append(dst, b2u(f.IP.IsValid()), b2u(f.IPObfuscated), b2u(f.Userinfo), b2u(f.HostMismatch), b2u(f.HasBody))
	dst = appendStr(dst, f.Path)
	if f.PathDecoded != f.Path {
		dst = appendStr(dst, f.PathDecoded)
	}
	return dst
}

// AddTo inserts the facts into the Rego input. The refusal facts
// (path flags, ip_obfuscated, userinfo, host_mismatch) go in as one list,
// input.flags, in a fixed order, so the base rules refuse with one lookup.
func (f *URLFacts) AddTo(in ast.Object) {
	in.Insert(termMethod, constTerm(f.Method))
	in.Insert(termScheme, constTerm(f.Scheme))
	path := ast.StringTerm(f.Path)
	in.Insert(termPath, path)
	if f.PathDecoded != f.Path {
		path = ast.StringTerm(f.PathDecoded)
	}
	in.Insert(termPathDecoded, path)
	in.Insert(termFlags, flagsTerm(f.PathFlags, f.IPObfuscated, f.Userinfo, f.HostMismatch))
	addHost(in, f.Host, f.IP, f.Port)
	if f.Body != nil {
		f.Body.addTo(in)
	}
}

// Keys of the Rego input, built once.
var (
	termKind        = ast.StringTerm("kind")
	termIdentity    = ast.StringTerm("identity")
	termID          = ast.StringTerm("id")
	termAttributes  = ast.StringTerm("attributes")
	termMethod      = ast.StringTerm("method")
	termScheme      = ast.StringTerm("scheme")
	termHost        = ast.StringTerm("host")
	termIP          = ast.StringTerm("ip")
	termPort        = ast.StringTerm("port")
	termPath        = ast.StringTerm("path")
	termPathDecoded = ast.StringTerm("path_decoded")
	termFlags       = ast.StringTerm("flags")
	flagTerms       [flagCount]*ast.Term
	termObfuscated  = ast.StringTerm("ip_obfuscated")
	termUserinfo    = ast.StringTerm("userinfo")
	termMismatch    = ast.StringTerm(string(ReasonHostMismatch))
	emptyFlags      = ast.ArrayTerm()
)

// constTerms are the methods and schemes nearly every request carries,
// built once: input terms are only read during evaluation.
var constTerms = func() map[string]*ast.Term {
	m := map[string]*ast.Term{}
	for _, s := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "http", "https"} {
		m[s] = ast.StringTerm(s)
	}
	return m
}()

func constTerm(s string) *ast.Term {
	if t, ok := constTerms[s]; ok {
		return t
	}
	return ast.StringTerm(s)
}

func init() {
	for i, n := range flagNames {
		flagTerms[i] = ast.StringTerm(n)
	}
}

// flagsTerm lists the refusal facts that are set, path flags first.
func flagsTerm(f PathFlags, obfuscated, userinfo, mismatch bool) *ast.Term {
	if f == 0 && !obfuscated && !userinfo && !mismatch {
		return emptyFlags
	}
	var ts []*ast.Term
	for i := range flagCount {
		if f&(1<<i) != 0 {
			ts = append(ts, flagTerms[i])
		}
	}
	if obfuscated {
		ts = append(ts, termObfuscated)
	}
	if userinfo {
		ts = append(ts, termUserinfo)
	}
	if mismatch {
		ts = append(ts, termMismatch)
	}
	return ast.ArrayTerm(ts...)
}

// addHost inserts the host facts shared by HTTP and CONNECT: host, port
// and, for an IP literal, ip (the same canonical string, matched against
// CIDR rules). The rule views the host matches go in as input.views (see
// viewIndex).
func addHost(in ast.Object, host string, ip netip.Addr, port uint16) {
	hostTerm := ast.StringTerm(host)
	in.Insert(termHost, hostTerm)
	in.Insert(termPort, ast.IntNumberTerm(int(port)))
	if ip.IsValid() {
		in.Insert(termIP, hostTerm)
	}
}

func appendStr(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func b2u(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// isToken reports whether s is an RFC 9110 token (a method name).
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return s != ""
}
