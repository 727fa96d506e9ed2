package socks5

import (
	"bytes"
	"net/netip"
	"reflect"
	"testing"
)

// FuzzHandshake parses a greeting, credentials and a request from
// arbitrary bytes, with a round-trip oracle both ways: what parses encodes
// to exactly the bytes it was read from, and parses back equal; and a
// request built from the fuzzer's fields encodes to bytes that parse back
// to it.
func FuzzHandshake(f *testing.F) {
	f.Add([]byte{5, 2, 0, 2}, []byte{1, 5, 'a', 'g', 'e', 'n', 't', 3, 't', 'o', 'k'},
		[]byte{5, 1, 0, 3, 3, 'a', '.', 'b', 1, 187}, byte(1), "example.com", []byte{}, uint16(443))
	f.Add([]byte{5, 1, 0}, []byte{1, 0, 0}, []byte{5, 1, 0, 1, 169, 254, 169, 254, 0, 80}, byte(2), "", []byte{10, 0, 0, 1}, uint16(80))
	f.Add([]byte{5, 0}, []byte{}, append([]byte{5, 3, 0, 4}, make([]byte, 18)...), byte(3), "", make([]byte, 16), uint16(0))
	f.Fuzz(func(t *testing.T, greeting, creds, request []byte, cmd byte, host string, addr []byte, port uint16) {
		if g, err := ReadGreeting(bytes.NewReader(greeting)); err == nil {
			enc := g.Append(nil)
			if !bytes.HasPrefix(greeting, enc) {
				t.Fatalf("greeting %v encodes to %v, not the bytes it was read from", greeting, enc)
			}
			if g2, err := ReadGreeting(bytes.NewReader(enc)); err != nil || !reflect.DeepEqual(g, g2) {
				t.Fatalf("greeting %+v round-trips to %+v, %v", g, g2, err)
			}
		}
		if c, err := ReadCredentials(bytes.NewReader(creds)); err == nil {
			enc := c.Append(nil)
			if !bytes.HasPrefix(creds, enc) {
				t.Fatalf("credentials %v encode to %v, not the bytes they were read from", creds, enc)
			}
			if c2, err := ReadCredentials(bytes.NewReader(enc)); err != nil || c != c2 {
				t.Fatalf("credentials %+v round-trip to %+v, %v", c, c2, err)
			}
		}
		if q, err := ReadRequest(bytes.NewReader(request)); err == nil {
			enc := q.Append(nil)
			if !bytes.HasPrefix(request, enc) {
				t.Fatalf("request %v encodes to %v, not the bytes it was read from", request, enc)
			}
			if q2, err := ReadRequest(bytes.NewReader(enc)); err != nil || q != q2 {
				t.Fatalf("request %+v round-trips to %+v, %v", q, q2, err)
			}
		}
		// Encode → parse: any request the fields can express.
		q := Request{Command: Command(cmd), Port: port}
		if a, ok := netip.AddrFromSlice(addr); ok {
			q.Addr = a
		} else if host != "" && len(host) <= 255 {
			q.Host = host
		} else {
			return
		}
		if got, err := ReadRequest(bytes.NewReader(q.Append(nil))); err != nil || got != q {
			t.Fatalf("request %+v encodes and parses to %+v, %v", q, got, err)
		}
	})
}
