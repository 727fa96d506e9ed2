package proxy

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"

	xproxy "golang.org/x/net/proxy"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/dnsguard"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/socks5"
)

// startSOCKS serves f's proxy on a SOCKS5 listener too and returns its
// address.
func startSOCKS(tb testing.TB, f *inspectFixture) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go f.srv.ServeSOCKS(ln) //nolint:errcheck // ends with the fixture's Shutdown
	return ln.Addr().String()
}

// socksFixture is the inspect fixture with rules for the SOCKS5 tests:
// example.com:<port> opaque and host-wide, 127.0.0.1:<port> by IP
// literal, the address floor real (loopback allowed on the upstream's
// port by `internal:`), and identity sbx-1 with token s3cret.
func socksFixture(t *testing.T) (*inspectFixture, string) {
	t.Helper()
	sum := sha256.Sum256([]byte("s3cret"))
	f := startInspect(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") }),
		inspectOptions{
			rules: `{"rules": [
				{"id": "open", "hosts": ["example.com"], "ports": [PORT]},
				{"id": "literal", "hosts": ["127.0.0.1"], "ports": [PORT]},
				{"id": "meta", "hosts": ["169.254.169.254"], "ports": [80]}
			]}`,
			ids:   identity.Config{{ID: "sbx-1", TokenSHA256: hex.EncodeToString(sum[:])}},
			floor: loopbackFloor(t),
		})
	return f, startSOCKS(t, f)
}

// loopbackFloor is the real address floor with loopback allowed on every
// port: the fixture's upstream listens there.
func loopbackFloor(tb testing.TB) policy.Floor {
	fl, err := dnsguard.NewFloor(nil)
	if err != nil {
		tb.Fatal(err)
	}
	return loopbackAnyPort{fl}
}

// loopbackAnyPort lets every loopback port through, the floor deciding
// every other address.
type loopbackAnyPort struct{ *dnsguard.Floor }

func (l loopbackAnyPort) Check(a netip.Addr, port uint16) error {
	if a.IsLoopback() {
		return nil
	}
	return l.Floor.Check(a, port)
}

func socksDialer(tb testing.TB, addr string, auth *xproxy.Auth) xproxy.ContextDialer {
	tb.Helper()
	d, err := xproxy.SOCKS5("tcp", addr, auth, xproxy.Direct)
	if err != nil {
		tb.Fatal(err)
	}
	return d.(xproxy.ContextDialer)
}

// TestSOCKSConnect runs a real SOCKS5 client (x/net/proxy's) through the
// listener: what is allowed reaches the upstream, what is refused gets the
// reply code for its reason, and every outcome is audited as a CONNECT
// via "socks".
func TestSOCKSConnect(t *testing.T) {
	f, socks := socksFixture(t)
	good := &xproxy.Auth{User: "sbx-1", Password: "s3cret"}
	roots := x509.NewCertPool()
	roots.AddCert(f.up.Certificate())
	tests := []struct {
		name       string
		auth       *xproxy.Auth
		target     string
		wantReason policy.Reason
		wantHost   string
		wantUser   string
	}{
		{name: "allowed name", auth: good, target: "example.com:" + f.port, wantHost: "example.com"},
		{name: "denied name", auth: good, target: "denied.example:443", wantReason: policy.ReasonNoMatchingRule, wantHost: "denied.example"},
		{name: "ip literal decided as a literal", auth: good, target: "127.0.0.1:" + f.port, wantHost: "127.0.0.1"},
		{name: "another literal", auth: good, target: "127.0.0.2:" + f.port, wantReason: policy.ReasonNoMatchingRule, wantHost: "127.0.0.2"},
		{name: "metadata address", auth: good, target: "169.254.169.254:80", wantReason: policy.ReasonMetadataAddress, wantHost: "169.254.169.254"},
		{name: "bad password", auth: &xproxy.Auth{User: "sbx-1", Password: "nope"}, target: "example.com:" + f.port, wantReason: policy.ReasonProxyAuthInvalid, wantUser: "sbx-1"},
		{name: "no credentials, no source mapping", target: "example.com:" + f.port, wantReason: policy.ReasonProxyAuthRequired, wantHost: "example.com"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := f.audit.Len()
			d := socksDialer(t, socks, tc.auth)
			c, err := d.DialContext(context.Background(), "tcp", tc.target)
			if tc.wantReason != "" {
				if err == nil {
					c.Close()
					t.Fatalf("dial %s through SOCKS5 succeeded; want refused %s", tc.target, tc.wantReason)
				}
			} else {
				if err != nil {
					t.Fatalf("dial %s through SOCKS5: %v", tc.target, err)
				}
				host, _, _ := net.SplitHostPort(tc.target)
				tc := tls.Client(c, &tls.Config{ServerName: host, RootCAs: roots})
				if err := tc.Handshake(); err != nil {
					t.Fatalf("TLS through the tunnel: %v", err)
				}
				tc.Close()
			}
			rec := f.audit.Wait(t, func(recs []audit.Record) bool { return len(recs) > n })[n]
			wantDecision := audit.DecisionAllow
			if tc.wantReason != "" {
				wantDecision = audit.DecisionDeny
			}
			if rec.Kind != audit.KindConnect || rec.Via != audit.ViaSOCKS || rec.Decision != wantDecision ||
				(tc.wantReason != "" && rec.Reason != string(tc.wantReason)) || rec.Host != tc.wantHost || rec.User != tc.wantUser {
				t.Errorf("record = %+v; want connect via socks, reason %q, host %q, user %q", rec, tc.wantReason, tc.wantHost, tc.wantUser)
			}
			if tc.wantReason == "" {
				done := f.audit.WaitRecord(t, func(r audit.Record) bool { return r.Kind == audit.KindConnectDone && r.Request == rec.Request })
				if done.Via != audit.ViaSOCKS || done.BytesIn == 0 {
					t.Errorf("completion = %+v; want via socks with bytes in", done)
				}
			}
		})
	}
}

// TestSOCKSHandshakeRefusals drives the handshake by hand: the reply code
// a client reads and the record of each refusal.
func TestSOCKSHandshakeRefusals(t *testing.T) {
	f, socks := socksFixture(t)
	creds := socks5.Credentials{User: "sbx-1", Password: "s3cret"}.Append(nil)
	tests := []struct {
		name       string
		send       [][]byte
		want       []byte
		wantReason policy.Reason
	}{
		{name: "bind", send: [][]byte{{5, 1, 2}, creds, {5, 2, 0, 1, 1, 2, 3, 4, 0, 80}},
			want: []byte{5, 2, 1, 0, 5, 7, 0, 1, 0, 0, 0, 0, 0, 0}, wantReason: policy.ReasonUnsupportedCommand},
		{name: "udp associate", send: [][]byte{{5, 1, 2}, creds, {5, 3, 0, 1, 0, 0, 0, 0, 0, 0}},
			want: []byte{5, 2, 1, 0, 5, 7, 0, 1, 0, 0, 0, 0, 0, 0}, wantReason: policy.ReasonUnsupportedCommand},
		{name: "unknown address type", send: [][]byte{{5, 1, 2}, creds, {5, 1, 0, 9}},
			want: []byte{5, 2, 1, 0, 5, 8, 0, 1, 0, 0, 0, 0, 0, 0}, wantReason: policy.ReasonMalformedRequest},
		{name: "no acceptable method", send: [][]byte{{5, 1, 1}},
			want: []byte{5, 0xff}, wantReason: policy.ReasonProxyAuthRequired},
		{name: "wrong password", send: [][]byte{{5, 1, 2}, socks5.Credentials{User: "sbx-1", Password: "x"}.Append(nil)},
			want: []byte{5, 2, 1, 1}, wantReason: policy.ReasonProxyAuthInvalid},
		{name: "socks4", send: [][]byte{{4, 1, 0, 80, 1, 2, 3, 4, 0}}, wantReason: policy.ReasonMalformedRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := f.audit.Len()
			c, err := net.Dial("tcp", socks)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for _, b := range tc.send {
				if _, err := c.Write(b); err != nil {
					t.Fatal(err)
				}
			}
			got, _ := io.ReadAll(c) // the server closes after its refusal
			if string(got) != string(tc.want) {
				t.Errorf("server wrote %v; want %v", got, tc.want)
			}
			rec := f.audit.Wait(t, func(recs []audit.Record) bool { return len(recs) > n })[n]
			if rec.Kind != audit.KindConnect || rec.Via != audit.ViaSOCKS || rec.Reason != string(tc.wantReason) {
				t.Errorf("record = %+v; want connect via socks refused %s", rec, tc.wantReason)
			}
		})
	}
}

// TestSOCKSReply pins the reply code of each class of refusal.
func TestSOCKSReply(t *testing.T) {
	tests := []struct {
		reason policy.Reason
		want   socks5.Reply
	}{
		{policy.ReasonNoMatchingRule, socks5.ReplyNotAllowed},
		{policy.ReasonMetadataAddress, socks5.ReplyNotAllowed},
		{policy.ReasonProxyAuthRequired, socks5.ReplyNotAllowed},
		{policy.ReasonUnsupportedCommand, socks5.ReplyCommandNotSupported},
		{policy.ReasonDNSNXDomain, socks5.ReplyHostUnreachable},
		{policy.ReasonUpstreamUnreachable, socks5.ReplyConnectionRefused},
		{policy.ReasonRateLimited, socks5.ReplyGeneralFailure},
		{policy.ReasonAuditUnavailable, socks5.ReplyGeneralFailure},
	}
	for _, tc := range tests {
		if got := socksReply(tc.reason); got != tc.want {
			t.Errorf("socksReply(%s) = %d; want %d", tc.reason, got, tc.want)
		}
	}
}
