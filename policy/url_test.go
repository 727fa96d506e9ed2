package policy

import (
	"bytes"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseHTTPFacts(t *testing.T) {
	tests := []struct {
		name       string
		method     string
		target     string
		hostHeader string
		want       URLFacts // kind and IP are checked through Host
		wantIP     bool
	}{
		{name: "absolute https", method: "GET", target: "https://Example.COM./a/b?q=1",
			want: URLFacts{Method: "GET", Scheme: "https", Host: "example.com", Port: 443, Path: "/a/b", PathDecoded: "/a/b", Query: "q=1"}},
		{name: "http default port", method: "GET", target: "http://example.com",
			want: URLFacts{Method: "GET", Scheme: "http", Host: "example.com", Port: 80, Path: "/", PathDecoded: "/"}},
		{name: "query only", method: "GET", target: "http://example.com?x",
			want: URLFacts{Method: "GET", Scheme: "http", Host: "example.com", Port: 80, Path: "/", PathDecoded: "/", Query: "x"}},
		{name: "explicit port", method: "PUT", target: "https://example.com:8443/x",
			want: URLFacts{Method: "PUT", Scheme: "https", Host: "example.com", Port: 8443, Path: "/x", PathDecoded: "/x"}},
		{name: "decoded once", method: "GET", target: "https://example.com/a%20b/%41",
			want: URLFacts{Method: "GET", Scheme: "https", Host: "example.com", Port: 443, Path: "/a%20b/%41", PathDecoded: "/a b/A"}},
		{name: "IDN", method: "GET", target: "https://Bücher.example/",
			want: URLFacts{Method: "GET", Scheme: "https", Host: "xn--bcher-kva.example", Port: 443, Path: "/", PathDecoded: "/"}},
		{name: "IPv6 canonical", method: "GET", target: "http://[2001:DB8:0::1]:8080/",
			want: URLFacts{Method: "GET", Scheme: "http", Host: "2001:db8::1", Port: 8080, Path: "/", PathDecoded: "/"}, wantIP: true},
		{name: "IPv4 decimal", method: "GET", target: "http://2130706433/",
			want: URLFacts{Method: "GET", Scheme: "http", Host: "127.0.0.1", Port: 80, Path: "/", PathDecoded: "/", IPObfuscated: true}, wantIP: true},
		{name: "IPv4 hex and octal mix", method: "GET", target: "http://0x7f.0.00.01/",
			want: URLFacts{Method: "GET", Scheme: "http", Host: "127.0.0.1", Port: 80, Path: "/", PathDecoded: "/", IPObfuscated: true}, wantIP: true},
		{name: "IPv4 0x alone is zero", method: "GET", target: "http://0x.0x.0x.0x/",
			want: URLFacts{Method: "GET", Scheme: "http", Host: "0.0.0.0", Port: 80, Path: "/", PathDecoded: "/", IPObfuscated: true}, wantIP: true},
		{name: "userinfo", method: "GET", target: "http://u:p@example.com/",
			want: URLFacts{Method: "GET", Scheme: "http", Host: "example.com", Port: 80, Path: "/", PathDecoded: "/", Userinfo: true}},
		{name: "host header same", method: "GET", target: "http://example.com/", hostHeader: "EXAMPLE.com:80",
			want: URLFacts{Method: "GET", Scheme: "http", Host: "example.com", Port: 80, Path: "/", PathDecoded: "/"}},
		{name: "host header other", method: "GET", target: "http://example.com/", hostHeader: "other.example",
			want: URLFacts{Method: "GET", Scheme: "http", Host: "example.com", Port: 80, Path: "/", PathDecoded: "/", HostMismatch: true}},
		{name: "origin form", method: "GET", target: "/x", hostHeader: "example.com:8080",
			want: URLFacts{Method: "GET", Scheme: "http", Host: "example.com", Port: 8080, Path: "/x", PathDecoded: "/x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseHTTP(KindHTTP, tt.method, tt.target, tt.hostHeader)
			if err != nil {
				t.Fatalf("ParseHTTP(%q) error %v", tt.target, err)
			}
			if got.IP.IsValid() != tt.wantIP || (tt.wantIP && got.IP.String() != tt.want.Host) {
				t.Errorf("ParseHTTP(%q).IP = %v; want ip=%v", tt.target, got.IP, tt.wantIP)
			}
			got.IP, got.kind = tt.want.IP, 0
			if *got != tt.want {
				t.Errorf("ParseHTTP(%q) = %+v; want %+v", tt.target, *got, tt.want)
			}
		})
	}
}

func TestPathFlags(t *testing.T) {
	tests := []pathFlagsCase{
		{"plain", "/a/b/", 0},
		{"root", "/", 0},
		{"encoded slash", "/a%2Fb", FlagEncodedSeparator},
		{"encoded backslash", "/a%5cb", FlagEncodedSeparator},
		{"encoded dot", "/a%2e", FlagEncodedDot},
		{"encoded dot segment", "/a/%2E%2E/b", FlagEncodedDot | FlagDotSegment},
		{"double encoding", "/a%252F", FlagDoubleEncoding},
		{"literal percent", "/a%25zz", 0},
		{"dot", "/a/./b", FlagDotSegment},
		{"dot dot end", "/a/..", FlagDotSegment},
		{"dots in name", "/a/..b/c.", 0},
		{"dot dot space", "/a/..%20/b", FlagDotSegment},
		{"dot space dot", "/a/.%20./b", FlagDotSegment},
		{"three dots", "/a/.../b", FlagDotSegment},
		{"space segment", "/a/%20/b", 0},
		{"empty", "/a//b", FlagEmptySegment},
		{"backslash", "/a\\b", FlagBackslash},
		{"NUL", "/a%00", FlagControlCharacter},
		{"raw tab", "/a\tb", FlagControlCharacter},
		{"DEL", "/a\x7f", FlagControlCharacter},
		{"params", "/a;b", FlagPathParameter},
		{"encoded params", "/a%3bb", FlagPathParameter},
	}
	checkPathFlags(t, tests)
}

// pathFlagsCase is a path and the flags parsePath must give it.
type pathFlagsCase struct {
	name string
	path string
	want PathFlags
}

func checkPathFlags(t *testing.T, tests []pathFlagsCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, got, err := parsePath(tt.path)
			if err != nil {
				t.Fatalf("parsePath(%q) error %v", tt.path, err)
			}
			if got != tt.want {
				t.Errorf("parsePath(%q) flags = %v; want %v", tt.path, got, tt.want)
			}
		})
	}
}

func TestParseErrorsAreDenyErrors(t *testing.T) {
	tests := []struct {
		name, method, target string
		reason               Reason
	}{
		{"scheme", "GET", "gopher://x/", "unsupported_scheme"},
		{"empty", "GET", "", "malformed_url"},
		{"method", "", "http://x/", "malformed_method"},
		{"long method", strings.Repeat("A", 33), "http://x/", "malformed_method"},
		{"host", "GET", "http://a_b!c/", "malformed_host"},
		{"long host", "GET", "http://" + strings.Repeat("a.", 127) + "com/", "host_too_long"},
		{"long path", "GET", "http://x/" + strings.Repeat("a", maxPath), "path_too_long"},
		{"long target", "GET", "http://x/?" + strings.Repeat("a", maxTarget), "target_too_long"},
		{"port", "GET", "http://x:65536/", "malformed_port"},
		{"escape", "GET", "http://x/%G0", "malformed_url"},
		{"redirect kind only", "GET", "http://x/", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kind := KindHTTP
			if tt.reason == "" {
				kind, tt.reason = KindConnect, "malformed_url"
			}
			_, err := ParseHTTP(kind, tt.method, tt.target, "")
			var de *DenyError
			if !errors.As(err, &de) || de.Reason != tt.reason {
				t.Errorf("ParseHTTP(%q) error = %v; want DenyError %s", tt.target, err, tt.reason)
			}
		})
	}
}

func TestParseConnect(t *testing.T) {
	tests := []struct {
		target string
		host   string
		port   uint16
		obf    bool
		reason Reason
	}{
		{target: "Example.com.:443", host: "example.com", port: 443},
		{target: "[::1]:8443", host: "::1", port: 8443},
		{target: "0x7f.1:443", host: "127.0.0.1", port: 443, obf: true},
		{target: "example.com", reason: "malformed_port"},
		{target: "example.com:", reason: "malformed_port"},
		{target: "example.com:-1", reason: "malformed_port"},
		{target: "u@example.com:443", reason: "malformed_url"},
		{target: "[::1%eth0]:443", reason: "malformed_host"},
		{target: ":443", reason: "malformed_host"},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			f, err := ParseConnect(tt.target)
			if tt.reason != "" {
				var de *DenyError
				if !errors.As(err, &de) || de.Reason != tt.reason {
					t.Errorf("ParseConnect(%q) error = %v; want DenyError %s", tt.target, err, tt.reason)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseConnect(%q) error %v", tt.target, err)
			}
			if f.Host != tt.host || f.Port != tt.port || f.IPObfuscated != tt.obf {
				t.Errorf("ParseConnect(%q) = %+v; want host %s port %d obfuscated %v", tt.target, f, tt.host, tt.port, tt.obf)
			}
		})
	}
}

// FuzzParseHTTP checks that untrusted request lines never panic, that every
// refusal is a *DenyError, and that accepted facts keep their invariants.
func FuzzParseHTTP(f *testing.F) {
	for _, s := range []string{
		"http://example.com/a/b", "https://[::1]:443/%2F", "http://0x7f.1/", "/x",
		"http://u@h/", "http://h/%25%32%46", "http://ｅｘａｍｐｌｅ.com/", "http://1.2.3.4.5/",
		"http://xn--bcher-kva.example/", "https://h:0/", "http://h\\@i/", "http://[::ffff:1.2.3.4]/",
		"http://h/a%C0%AFb", "http://h/%E0%80%AE", "http://h/caf%C3%A9", "http://h/\xff",
	} {
		f.Add("GET", s, "")
		f.Add("GET", s, "example.com:80")
	}
	f.Fuzz(func(t *testing.T, method, target, hostHeader string) {
		u, err := ParseHTTP(KindHTTP, method, target, hostHeader)
		if err != nil {
			var de *DenyError
			if !errors.As(err, &de) || de.Reason == "" {
				t.Fatalf("ParseHTTP(%q) error %v is not a DenyError with a reason", target, err)
			}
			return
		}
		if u.Host == "" || len(u.Host) > maxHost || u.Port == 0 || !strings.HasPrefix(u.Path, "/") {
			t.Fatalf("ParseHTTP(%q) = %+v breaks an invariant", target, u)
		}
		if u.IP.IsValid() && u.IP.String() != u.Host {
			t.Fatalf("ParseHTTP(%q): ip %v is not host %q", target, u.IP, u.Host)
		}
		// The normalized host is a fixed point: it parses to itself.
		h, err := parseHost(hostForURL(u))
		if err != nil || h.name != u.Host || h.obfuscated {
			t.Fatalf("parseHost(%q) = %+v, %v; want %q unobfuscated", u.Host, h, err, u.Host)
		}
		// The decoder's own witness: a decoded path is flagged
		// invalid_utf8 exactly when unicode/utf8 rejects it.
		if utf8.ValidString(u.PathDecoded) == (u.PathFlags&FlagInvalidUTF8 != 0) {
			t.Fatalf("ParseHTTP(%q): path_decoded %q valid UTF-8 %v but flags %v", target, u.PathDecoded, utf8.ValidString(u.PathDecoded), u.PathFlags)
		}
		if !bytes.Equal(u.AppendKey(nil), u.AppendKey(nil)) {
			t.Fatalf("AppendKey is not deterministic")
		}
	})
}

// FuzzParseConnect is FuzzParseHTTP for CONNECT targets, with two more
// oracles: the facts are a fixed point (written back as host:port they
// parse to themselves, unobfuscated), and every accepted target splits as
// net.SplitHostPort splits it, to the same port.
func FuzzParseConnect(f *testing.F) {
	for _, s := range []string{"example.com:443", "[::1]:443", "2130706433:80", "a:b:c", "[::1]", ":"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		c, err := ParseConnect(target)
		if err != nil {
			var de *DenyError
			if !errors.As(err, &de) || de.Reason == "" {
				t.Fatalf("ParseConnect(%q) error %v is not a DenyError with a reason", target, err)
			}
			return
		}
		if c.Host == "" || c.Port == 0 {
			t.Fatalf("ParseConnect(%q) = %+v breaks an invariant", target, c)
		}
		if c.IP.IsValid() && c.IP.String() != c.Host {
			t.Fatalf("ParseConnect(%q): ip %v is not host %q", target, c.IP, c.Host)
		}
		canonical := net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port)))
		again, err := ParseConnect(canonical)
		if want := (ConnectFacts{Host: c.Host, IP: c.IP, Port: c.Port}); err != nil || *again != want {
			t.Fatalf("ParseConnect(%q) = %+v; ParseConnect(%q) = %+v, %v; want %+v", target, c, canonical, again, err, want)
		}
		if _, p, err := net.SplitHostPort(target); err != nil || p != strconv.Itoa(int(c.Port)) && strings.TrimLeft(p, "0") != strconv.Itoa(int(c.Port)) {
			t.Fatalf("ParseConnect(%q) = %+v; net.SplitHostPort = port %q, %v", target, c, p, err)
		}
	})
}

func hostForURL(u *URLFacts) string {
	if u.IP.Is6() {
		return "[" + u.Host + "]"
	}
	return u.Host
}

// TestCheckH2Path: an h2 :path must be an RFC 3986 path-absolute with an
// optional query; a space (which would end the HTTP/1.1 request-target it
// is written into) or any byte outside the grammar is malformed_url.
func TestCheckH2Path(t *testing.T) {
	tests := []struct {
		path string
		ok   bool
	}{
		{"/", true},
		{"/a/b?q=1&r=%2F", true},
		{"/a:b@c/!$&'()*+,;=-._~", true},
		{"/a?b/c?d", true},
		{"/a b", false},
		{"/a\tb", false},
		{"/a\x00", false},
		{"/a\"b", false},
		{"/a<b>", false},
		{"/a{b}|c", false},
		{"/a^b`c", false},
		{"/a\\b", false},
		{"/a#b", false},
		{"/a[b]", false},
		{"/caf\xc3\xa9", false},
		{"/a%2", false},
		{"/a?%zz", false},
		{"a/b", false},
		{"*", false},
		{"", false},
	}
	for _, tt := range tests {
		err := CheckH2Path(tt.path)
		var de *DenyError
		if (err == nil) != tt.ok || (err != nil && (!errors.As(err, &de) || de.Reason != ReasonMalformedURL)) {
			t.Errorf("CheckH2Path(%q) = %v; want ok %v, else malformed_url", tt.path, err, tt.ok)
		}
	}
}
