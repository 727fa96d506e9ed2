package proxy

import (
	"bytes"
	"testing"

	"github.com/egressd/egressd/policy"
)

// A plaintext tunnel carries a first HTTP request only for its own host and
// port: a server that answers for many hosts must not be asked for another
// one through it. Other protocols pass.
func TestPlaintextTunnelBoundToHost(t *testing.T) {
	tests := []struct {
		name     string
		flight   func(port string) string
		wantSent bool
	}{
		{"same host and port", func(p string) string { return "GET / HTTP/1.1\r\nHost: 127.0.0.1:" + p + "\r\n\r\n" }, true},
		{"same host, no port", func(p string) string { return "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" }, true},
		{"other host", func(p string) string { return "GET / HTTP/1.1\r\nHost: other-tenant.cdn.example\r\n\r\n" }, false},
		{"other port", func(p string) string { return "GET / HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n" }, false},
		{"absolute-form target for another host", func(p string) string {
			return "GET http://other-tenant.cdn.example/ HTTP/1.1\r\nHost: 127.0.0.1:" + p + "\r\n\r\n"
		}, false},
		{"two Host headers", func(p string) string {
			return "GET / HTTP/1.1\r\nHost: 127.0.0.1:" + p + "\r\nHost: other-tenant.cdn.example\r\n\r\n"
		}, false},
		{"no Host", func(p string) string { return "GET / HTTP/1.0\r\n\r\n" }, false},
		{"empty line first, then another host", func(p string) string { return "\r\nGET / HTTP/1.1\r\nHost: other-tenant.cdn.example\r\n\r\n" }, false},
		{"lower-case method, another host", func(p string) string { return "get / HTTP/1.1\r\nHost: other-tenant.cdn.example\r\n\r\n" }, false},
		{"bare LF lines, another host", func(p string) string { return "GET / HTTP/1.1\nHost: other-tenant.cdn.example\n\n" }, false},
		{"SSH banner", func(p string) string { return "SSH-2.0-OpenSSH_9.6 Ubuntu-3ubuntu13\r\n" }, true},
		{"binary protocol", func(p string) string { return "\x00\x00\x00\x08\x04\xd2\x16\x2f" }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ft := openFlightTunnel(t, "127.0.0.1")
			flight := tt.flight(ft.port)
			b := ft.send(t, []byte(flight))
			if sent := string(b) == flight; sent != tt.wantSent || (!sent && len(b) != 0) {
				t.Errorf("upstream received %q; want the flight %v and nothing else", b, tt.wantSent)
			}
			if !tt.wantSent {
				ft.wantRefused(t, policy.ReasonTunnelHostDiffs)
			}
		})
	}
}

// The scanner's answer does not depend on how the bytes arrive, and it
// looks at each byte once.
func FuzzPlainScan(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), uint8(1))
	f.Add([]byte("\r\n\nget / HTTP/1.1\nHost: a\n\n"), uint8(3))
	f.Add([]byte("SSH-2.0-x y\r\n"), uint8(2))
	f.Add([]byte("\x16\x03\x01"), uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, step uint8) {
		var whole plainScan
		want := whole.scan(b)
		var s plainScan
		var got plainState
		n := max(int(step), 1)
		for end := min(n, len(b)); ; end = min(end+n, len(b)) {
			got = s.scan(b[:end])
			if end == len(b) {
				break
			}
		}
		if got != want || s.start != whole.start || s.off != whole.off {
			t.Errorf("scanned in %d-byte steps: state %d, head [%d:%d]; whole: state %d, head [%d:%d]", n, got, s.start, s.off, want, whole.start, whole.off)
		}
		if s.off > len(b) {
			t.Errorf("scanned %d bytes of %d", s.off, len(b))
		}
		if got == plainDone && !bytes.HasSuffix(b[:s.off], []byte("\n")) {
			t.Errorf("head %q does not end with a line end", b[s.start:s.off])
		}
	})
}
