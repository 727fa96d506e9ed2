package proxy

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"strconv"
	"testing"
	"testing/iotest"
)

// FuzzTransparentFlight reads a transparent connection's first flight
// from arbitrary bytes, delivered a byte at a time or whole, with the
// tunnel's own checks as the oracle: the flight returned is the bytes
// read, unaltered; the name it carries is one the tunnel's first-flight
// check accepts for that same flight (a ClientHello's SNI matches it; an
// HTTP request's Host names it, checkPlainHost), so the prelude and the
// tunnel never disagree about which host a connection is for.
func FuzzTransparentFlight(f *testing.F) {
	f.Add(clientHello(f, "example.com"), false)
	f.Add(clientHello(f, "Example.COM."), true)
	f.Add([]byte("GET / HTTP/1.1\r\nHost: plain.example:8080\r\n\r\n"), false)
	f.Add([]byte("GET http://a.example/ HTTP/1.1\r\nHost: b.example\r\n\r\n"), true)
	f.Add([]byte("GET / HTTP/1.1\r\nHost: [2001:db8::1]\r\n\r\n"), false)
	f.Add([]byte("SSH-2.0-OpenSSH_9.6\r\n"), false)
	s := &Server{cfg: DefaultConfig()}
	f.Fuzz(func(t *testing.T, in []byte, oneByte bool) {
		src := bytes.NewReader(in)
		r := iotestReader(src, oneByte)
		a := &transparentArrival{}
		flight, name, rf := s.readTransparentFlight(r, a)
		if !bytes.HasPrefix(in, flight) {
			t.Fatalf("flight %q is not a prefix of the input %q", flight, in)
		}
		if rf != nil {
			if rf.Reason == "" {
				t.Fatalf("refusal without a reason")
			}
			return
		}
		if name == "" {
			t.Fatalf("no refusal and no name for %q", in)
		}
		switch {
		case a.tls:
			_, h, reason, _ := readHello(flight[:min(len(flight), 1)], nil, bytes.NewReader(flight[min(len(flight), 1):]))
			if reason != "" || !sniMatches(h.sni, name) {
				t.Fatalf("name %q from a ClientHello whose SNI %q the tunnel would refuse (%s)", name, h.sni, reason)
			}
		case a.http:
			req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(flight)))
			if err != nil {
				t.Fatalf("name %q from a head net/http cannot read: %v", name, err)
			}
			// The port is the original destination's: take the one the
			// Host names, if any, so that only the name is compared.
			var port uint16
			if _, p, err := net.SplitHostPort(req.Host); err == nil {
				n, _ := strconv.ParseUint(p, 10, 16)
				port = uint16(n)
			}
			if why := checkPlainHost(req, name, port); why != "" {
				t.Fatalf("name %q for Host %q, which the tunnel refuses: %s", name, req.Host, why)
			}
		default:
			t.Fatalf("name %q from neither TLS nor HTTP", name)
		}
	})
}

// iotestReader is src, a byte per read when oneByte.
func iotestReader(src *bytes.Reader, oneByte bool) interface{ Read([]byte) (int, error) } {
	if oneByte {
		return iotest.OneByteReader(src)
	}
	return src
}
