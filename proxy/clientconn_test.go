package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/policy"
)

// waitRecords waits until the audit log holds exactly want
// (audittest.Summary of the records).
func waitRecords(t *testing.T, a *audittest.Recorder, want string) {
	t.Helper()
	a.Wait(t, func(recs []audit.Record) bool { return audittest.Summary(recs) == want })
}

func TestRefusedByHTTPIsAudited(t *testing.T) {
	tests := []struct {
		name       string
		send       string
		wantStatus string // prefix of the response; empty when none is expected
		wantRecord string
	}{
		{"garbage request line", "NOT A REQUEST\r\n\r\n", "HTTP/1.1 400", "http:deny:" + string(policy.ReasonMalformedRequest)},
		{"headers over the limit", "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nX-Big: " +
			strings.Repeat("a", 8<<10) + "\r\n\r\n", "HTTP/1.1 431", "http:deny:" + string(policy.ReasonHeadersTooLarge)},
		{"unsupported version", "GET http://example.com/ HTTP/2.7\r\nHost: example.com\r\n\r\n", "HTTP/1.1 505", "http:deny:" + string(policy.ReasonUnsupportedHTTPVersion)},
		{"unknown expectation", "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nExpect: magic\r\n\r\n", "HTTP/1.1 417", "http:deny:" + string(policy.ReasonExpectationFailed)},
		{"incomplete at timeout", "GET http://example.com/ HTTP/1.1\r\nHost: exa", "", "http:deny:" + string(policy.ReasonIncompleteRequest)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MaxHeaderBytes = 4 << 10
			cfg.ReadHeaderTimeout = 300 * time.Millisecond
			a := &audittest.Recorder{}
			c := dialProxy(t, startProxy(t, cfg, allowAll{}, a))
			io.WriteString(c, tt.send)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, _ := io.ReadAll(c)
			if !strings.HasPrefix(string(resp), tt.wantStatus) {
				t.Errorf("response = %q; want prefix %q", resp, tt.wantStatus)
			}
			waitRecords(t, a, tt.wantRecord)
		})
	}
}

func TestHandledRequestIsNotAuditedTwice(t *testing.T) {
	a := &audittest.Recorder{}
	c, err := net.Dial("tcp", startProxy(t, DefaultConfig(), allowAll{}, a))
	if err != nil {
		t.Fatal(err)
	}
	// Not a proxy request: the handler refuses it and closes nothing, so the
	// client's close ends the connection after a handled request.
	io.WriteString(c, "GET /local HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	c.Close()
	waitRecords(t, a, "http:deny:"+string(policy.ReasonNotProxyRequest))
	// A quiet period to show a second record does not come: nothing
	// signals the end of the connection's close hook, which would write
	// it (Server.connState, StateClosed).
	time.Sleep(100 * time.Millisecond)
	if got := audittest.Summary(a.Records()); got != "http:deny:"+string(policy.ReasonNotProxyRequest) {
		t.Errorf("audit records after close = %s; want only the handler's", got)
	}
}

// oneConnUpstream serves one connection on loopback with handle and
// returns its port.
func oneConnUpstream(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	go func() {
		c, err := up.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		handle(c)
	}()
	_, port, _ := net.SplitHostPort(up.Addr().String())
	return port
}

// recordingUpstream is a one-connection upstream that hands back
// everything the connection carried once the client half-closes it.
func recordingUpstream(t *testing.T) (port string, got <-chan []byte) {
	ch := make(chan []byte, 1)
	port = oneConnUpstream(t, func(c net.Conn) {
		b, _ := io.ReadAll(c)
		ch <- b
	})
	return port, ch
}

// dialProxy connects to addr, closed when the test ends.
func dialProxy(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// openTunnel sends CONNECT target, followed at once by early, and reads
// the 200.
func openTunnel(t *testing.T, proxyAddr, target, early string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c := dialProxy(t, proxyAddr)
	io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n"+early)
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect}); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s = %v, %v; want 200", target, resp, err)
	}
	return c, br
}

// received waits for what a recordingUpstream got.
func received(t *testing.T, got <-chan []byte) []byte {
	t.Helper()
	select {
	case b := <-got:
		return b
	case <-time.After(10 * time.Second):
		t.Fatal("upstream connection did not end")
		return nil
	}
}

// flightTunnel is a tunnel through an allow-all proxy to a recordingUpstream,
// for tests of the first-flight checks.
type flightTunnel struct {
	c     net.Conn
	port  string // the upstream's
	got   <-chan []byte
	audit *audittest.Recorder
}

// openFlightTunnel opens a tunnel to host at a new recordingUpstream's port.
func openFlightTunnel(t *testing.T, host string) *flightTunnel {
	t.Helper()
	ft := &flightTunnel{audit: &audittest.Recorder{}}
	ft.port, ft.got = recordingUpstream(t)
	ft.c, _ = openTunnel(t, startProxy(t, DefaultConfig(), allowAll{}, ft.audit), host+":"+ft.port, "")
	return ft
}

// send writes flight, half-closes the tunnel and returns what the upstream
// received.
func (ft *flightTunnel) send(t *testing.T, flight []byte) []byte {
	t.Helper()
	ft.c.Write(flight)
	ft.c.(*net.TCPConn).CloseWrite()
	return received(t, ft.got)
}

// wantRefused waits for the records of a tunnel allowed, then refused on
// its first flight with reason.
func (ft *flightTunnel) wantRefused(t *testing.T, reason policy.Reason) {
	t.Helper()
	waitRecords(t, ft.audit, "connect:allow:allowed,connect:deny:"+string(reason)+",connect_done:deny:"+string(reason))
}

// A client may send its first tunnel bytes in the same write as the CONNECT
// head; they must reach the upstream, first and once, also when they are
// only part of the first request head the tunnel checks.
func TestConnectEarlyBytes(t *testing.T) {
	port, got := recordingUpstream(t)
	early := "GET /x HTTP/1.1\r\nHost: 127.0.0.1:" + port + "\r\n"
	c, _ := openTunnel(t, startProxy(t, DefaultConfig(), allowAll{}, &audittest.Recorder{}), "127.0.0.1:"+port, early)
	later := "\r\nGET /y HTTP/1.1\r\nHost: 127.0.0.1:" + port + "\r\n\r\n"
	io.WriteString(c, later)
	c.(*net.TCPConn).CloseWrite()
	if s, want := string(received(t, got)), early+later; s != want {
		t.Errorf("upstream received %q; want %q", s, want)
	}
}

type denyAll struct{}

func (denyAll) Decide(context.Context, policy.Input) policy.Decision {
	return policy.Deny("rule_revoked", "")
}

func (denyAll) Digest() string { return "" }

// A reload that no longer allows an open tunnel closes it, and the
// tunnel's completion record says why; one still allowed stays open. The
// first flight is 4 bytes, shorter than a TLS record header and no HTTP
// request, and must be forwarded at once for the echo to arrive.
func TestReloadRevokesTunnels(t *testing.T) {
	for _, tt := range []struct {
		name       string
		engine     policy.Decider
		wantClosed bool
	}{
		{"still allowed", allowAll{}, false},
		{"revoked", denyAll{}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			port := oneConnUpstream(t, func(c net.Conn) { io.Copy(c, c) })
			a := &audittest.Recorder{}
			s, addr := startServer(t, DefaultConfig(), allowAll{}, a)
			c, br := openTunnel(t, addr, "127.0.0.1:"+port, "<pi>")
			echo := make([]byte, 4)
			if _, err := io.ReadFull(br, echo); err != nil {
				t.Fatalf("read echo: %v", err)
			}
			s.Reload(tt.engine, s.state.Load().ids)
			c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			_, err := br.ReadByte()
			closed := err == io.EOF || errors.Is(err, syscall.ECONNRESET)
			if closed != tt.wantClosed {
				t.Fatalf("read after reload = %v; want closed %v", err, tt.wantClosed)
			}
			if tt.wantClosed {
				waitRecords(t, a, "connect:allow:allowed,connect_done:deny:rule_revoked")
			}
		})
	}
}

// A ClientHello split over several TLS records is reassembled and checked
// as a whole: forwarded byte for byte when its name is the CONNECT host,
// refused when it is not.
func TestConnectSplitClientHello(t *testing.T) {
	tests := []struct {
		name     string
		flight   func(t *testing.T) []byte
		wantSent bool
	}{
		// Three records, the first too short for the handshake header.
		{"matching name", func(t *testing.T) []byte { return splitRecords(t, clientHello(t, "localhost"), 3, 100) }, true},
		{"other name", func(t *testing.T) []byte { return splitRecords(t, clientHello(t, "evil.example"), 3, 100) }, false},
		// Two full-size records: more than the first-flight buffer holds.
		{"larger than one record", func(t *testing.T) []byte { return paddedHello("localhost", 20000) }, true},
		{"larger than one record, other name", func(t *testing.T) []byte { return paddedHello("evil.example", 20000) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ft := openFlightTunnel(t, "localhost")
			flight := tt.flight(t)
			b := ft.send(t, flight)
			if sent := bytes.Equal(b, flight); sent != tt.wantSent {
				t.Errorf("upstream received %d bytes (the flight: %v); want the flight %v", len(b), sent, tt.wantSent)
			}
			if !tt.wantSent {
				ft.wantRefused(t, policy.ReasonSNIMismatch)
			}
		})
	}
}

// paddedHello is a minimal ClientHello naming sni with a padding extension
// of pad bytes, framed in records of at most 16 KiB.
func paddedHello(sni string, pad int) []byte {
	u16 := func(b []byte, n int) []byte { return append(b, byte(n>>8), byte(n)) }
	var ext []byte
	ext = u16(ext, tlsExtServerName)
	ext = u16(ext, len(sni)+5)
	ext = u16(ext, len(sni)+3)
	ext = append(ext, tlsServerNameTypeDNS)
	ext = u16(ext, len(sni))
	ext = append(ext, sni...)
	ext = u16(ext, 21) // padding
	ext = u16(ext, pad)
	ext = append(ext, make([]byte, pad)...)
	body := append([]byte{3, 3}, make([]byte, 32)...) // version, random
	body = append(body, 0)                            // session id
	body = u16(body, 2)
	body = append(body, 0x13, 0x01) // one cipher suite
	body = append(body, 1, 0)       // null compression
	body = u16(body, len(ext))
	body = append(body, ext...)
	msg := append([]byte{tlsHandshakeClient, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body...)
	var out []byte
	for len(msg) > 0 {
		n := min(len(msg), tlsMaxRecordLen)
		out = append(out, tlsRecordHandshake, 3, 1, byte(n>>8), byte(n))
		out = append(out, msg[:n]...)
		msg = msg[n:]
	}
	return out
}
