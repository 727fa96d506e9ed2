package proxy

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/egressd/egressd/audit/audittest"

	"github.com/egressd/egressd/policy"
)

// A plaintext tunnel carries a first HTTP request only for its own host and
// port: a server that answers for many hosts must not be asked for another
// one through it, nor behind whitespace a lenient server skips. Other
// protocols pass.
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
		{"empty line first, same host", func(p string) string { return "\r\nGET / HTTP/1.1\r\nHost: 127.0.0.1:" + p + "\r\n\r\n" }, true},
		{"lower-case method, another host", func(p string) string { return "get / HTTP/1.1\r\nHost: other-tenant.cdn.example\r\n\r\n" }, false},
		{"bare LF lines, another host", func(p string) string { return "GET / HTTP/1.1\nHost: other-tenant.cdn.example\n\n" }, false},
		{"leading space, another host", func(p string) string { return " GET / HTTP/1.1\r\nHost: other-tenant.cdn.example\r\n\r\n" }, false},
		{"leading space, same host", func(p string) string { return " GET / HTTP/1.1\r\nHost: 127.0.0.1:" + p + "\r\n\r\n" }, false},
		{"empty line then tab", func(p string) string { return "\r\n\tGET / HTTP/1.1\r\nHost: other-tenant.cdn.example\r\n\r\n" }, false},
		{"leading NBSP", func(p string) string { return "\xa0GET / HTTP/1.1\r\nHost: other-tenant.cdn.example\r\n\r\n" }, false},
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
				ft.wantRefused(t, policy.ReasonTunnelHostMismatch)
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
	f.Add([]byte("\r\n\xa0GET / HTTP/1.1\r\n"), uint8(2))
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
			t.Errorf("scanned in %d-byte steps: state %d, start %d, off %d; whole: state %d, start %d, off %d", n, got, s.start, s.off, want, whole.start, whole.off)
		}
		if s.off > len(b) {
			t.Errorf("scanned %d bytes of %d", s.off, len(b))
		}
		if got == plainHTTP && (!isTokenChar(b[s.start]) || len(bytes.Trim(b[:s.start], "\r\n")) != 0) {
			t.Errorf("request line at %d of %q", s.start, b)
		}
	})
}

// Every request of a plaintext tunnel is bound, not only the first: a
// pipelined request for another host is refused and never reaches the
// upstream, while what net/http frames as a body (a request-shaped chunk
// included) passes as the body it is.
func TestPlaintextTunnelBindsEveryRequest(t *testing.T) {
	req := func(p, host, extra string) string {
		if host == "" {
			host = "127.0.0.1:" + p
		}
		return "POST / HTTP/1.1\r\nHost: " + host + "\r\n" + extra + "\r\n"
	}
	tests := []struct {
		name string
		// flight is sent at once; the upstream must receive its first
		// sent bytes, and the tunnel is refused with reason if set.
		flight func(p string) (flight string, sent int)
		reason policy.Reason
	}{
		{"pipelined, same host", func(p string) (string, int) {
			f := req(p, "", "") + req(p, "", "Content-Length: 3\r\n") + "abc" + req(p, "", "")
			return f, len(f)
		}, ""},
		{"pipelined, another host", func(p string) (string, int) {
			first := req(p, "", "")
			return first + req(p, "other-tenant.cdn.example", ""), len(first)
		}, policy.ReasonTunnelHostMismatch},
		{"another host after a body", func(p string) (string, int) {
			first := req(p, "", "Content-Length: 5\r\n") + "hello"
			return first + req(p, "other-tenant.cdn.example", ""), len(first)
		}, policy.ReasonTunnelHostMismatch},
		{"a request-shaped chunk is body", func(p string) (string, int) {
			chunk := req(p, "other-tenant.cdn.example", "")
			f := req(p, "", "Transfer-Encoding: chunked\r\n") + strconv.FormatInt(int64(len(chunk)), 16) + "\r\n" + chunk + "\r\n0\r\n\r\n"
			return f, len(f)
		}, ""},
		{"empty lines before a later request", func(p string) (string, int) {
			f := req(p, "", "Content-Length: 1\r\n") + "x\r\n\r\n" + req(p, "", "Transfer-Encoding: chunked\r\n") + "0\r\n\r\n"
			return f, len(f)
		}, ""},
		{"empty line before another host", func(p string) (string, int) {
			first := req(p, "", "")
			return first + "\r\n" + req(p, "other-tenant.cdn.example", ""), len(first)
		}, policy.ReasonTunnelHostMismatch},
		{"whitespace before a later request", func(p string) (string, int) {
			first := req(p, "", "")
			return first + " " + req(p, "other-tenant.cdn.example", ""), len(first)
		}, policy.ReasonTunnelHostMismatch},
		{"garbage after a request", func(p string) (string, int) {
			first := req(p, "", "")
			return first + "\x00\x01", len(first)
		}, policy.ReasonTunnelHostMismatch},
		{"Content-Length beside Transfer-Encoding", func(p string) (string, int) {
			return req(p, "", "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n") + "0\r\n\r\n", 0
		}, policy.ReasonTunnelHostMismatch},
		{"GET with a body", func(p string) (string, int) {
			return "GET / HTTP/1.1\r\nHost: 127.0.0.1:" + p + "\r\nContent-Length: 3\r\n\r\nabc", 0
		}, policy.ReasonRequestBodyNotAllowed},
		{"upgrade, then another protocol", func(p string) (string, int) {
			f := "GET / HTTP/1.1\r\nHost: 127.0.0.1:" + p + "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n\x81\x85mask-hello"
			return f, len(f)
		}, ""},
		{"upgrade ignored, then another host", func(p string) (string, int) {
			first := "GET / HTTP/1.1\r\nHost: 127.0.0.1:" + p + "\r\nUpgrade: x\r\n\r\n"
			return first + req(p, "other-tenant.cdn.example", ""), len(first)
		}, policy.ReasonTunnelHostMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ft := openFlightTunnel(t, "127.0.0.1")
			flight, sent := tt.flight(ft.port)
			if b := ft.send(t, []byte(flight)); string(b) != flight[:sent] {
				t.Errorf("upstream received %q; want %q", b, flight[:sent])
			}
			if tt.reason != "" {
				ft.wantRefused(t, tt.reason)
			}
		})
	}
}

// A later request on a kept-alive plaintext tunnel is bound too: after a
// first request for the tunnel's host has its answer, a second one for
// another host is refused, audited, and never reaches the upstream.
func TestPlaintextTunnelBindsKeepAliveRequests(t *testing.T) {
	hosts := make(chan string, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hosts <- r.Host
		io.WriteString(w, "hello "+r.Host)
	}))
	defer up.Close()
	_, port, _ := net.SplitHostPort(up.Listener.Addr().String())
	a := &audittest.Recorder{}
	c, br := openTunnel(t, startProxy(t, DefaultConfig(), allowAll{}, a), "127.0.0.1:"+port, "")
	for i, host := range []string{"127.0.0.1:" + port, "127.0.0.1"} {
		io.WriteString(c, "GET /"+strconv.Itoa(i)+" HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if got := <-hosts; got != host {
			t.Fatalf("upstream got Host %q; want %q", got, host)
		}
	}
	io.WriteString(c, "GET /2 HTTP/1.1\r\nHost: other-tenant.cdn.example\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := io.ReadAll(br); len(b) != 0 || err != nil {
		t.Errorf("client got %q, %v; want the tunnel closed", b, err)
	}
	waitRecords(t, a, "connect:allow:allowed,connect:deny:"+string(policy.ReasonTunnelHostMismatch)+",connect_done:deny:"+string(policy.ReasonTunnelHostMismatch))
	select {
	case h := <-hosts:
		t.Errorf("upstream got a request for %q; want none after the refusal", h)
	default:
	}
}
