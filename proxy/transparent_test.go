package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/policy"
)

// fakeGiven is what a test's DNS server gave: client → name → addresses.
type fakeGiven struct {
	mu    sync.Mutex
	given map[string][]netip.Addr // "client name"
}

func (g *fakeGiven) give(client, name string, addrs ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, a := range addrs {
		g.given[client+" "+name] = append(g.given[client+" "+name], netip.MustParseAddr(a))
	}
}

func (g *fakeGiven) Gave(client netip.Addr, name string, addr netip.Addr) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, a := range g.given[client.String()+" "+name] {
		if a == addr {
			return true
		}
	}
	return false
}

// transparentFixture is an inspect fixture serving a transparent listener
// whose original destination the test sets (dst), with DNS answers given
// to 127.0.0.1 from fakeGiven and 10.0.0.53 as egressd's own address.
type transparentFixture struct {
	*inspectFixture
	addr  string
	given *fakeGiven
	dst   atomic.Pointer[netip.AddrPort]
}

func startTransparent(t *testing.T, rules string) *transparentFixture {
	return startTransparentAs(t, rules, nil)
}

// startTransparentAs is startTransparent with identities ids.
func startTransparentAs(t *testing.T, rules string, ids identity.Config) *transparentFixture {
	t.Helper()
	f := &transparentFixture{
		inspectFixture: startInspect(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") }),
			inspectOptions{rules: rules, ids: ids}),
		given: &fakeGiven{given: map[string][]netip.Addr{}},
	}
	f.srv.given = f.given
	f.srv.own = []netip.Addr{netip.MustParseAddr("10.0.0.53")}
	// SO_ORIGINAL_DST needs a netfilter redirect; the test says where
	// each connection was going instead.
	f.srv.origDst = func(*net.TCPConn) (netip.AddrPort, error) { return *f.dst.Load(), nil }
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go f.srv.ServeTransparent(ln) //nolint:errcheck // ends with the fixture's Shutdown
	f.addr = ln.Addr().String()
	return f
}

// goingTo sets the original destination of the next connections.
func (f *transparentFixture) goingTo(t *testing.T, addr string) {
	p, err := strconv.ParseUint(f.port, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.AddrPortFrom(netip.MustParseAddr(addr), uint16(p))
	f.dst.Store(&ap)
}

// lastConnect waits for the first connect record after n.
func (f *transparentFixture) lastConnect(t *testing.T, n int) audit.Record {
	t.Helper()
	var rec audit.Record
	f.audit.Wait(t, func(recs []audit.Record) bool {
		for _, r := range recs[n:] {
			if r.Kind == audit.KindConnect {
				rec = r
				return true
			}
		}
		return false
	})
	return rec
}

// TestTransparentTLS decides redirected TLS connections by their SNI on
// the original destination's port: the destination must be one the DNS
// gave this client for that name, or egressd's own; no SNI and an ECH on
// an opaque rule are refused; refusals are TLS alerts; records say via
// "transparent".
func TestTransparentTLS(t *testing.T) {
	f := startTransparent(t, `{"rules": [{"id": "open", "hosts": ["example.com"], "ports": [PORT]}]}`)
	f.given.give("127.0.0.1", "example.com", "192.0.2.10")
	f.given.give("127.0.0.1", "denied.example", "192.0.2.20")
	roots := x509.NewCertPool()
	roots.AddCert(f.up.Certificate())
	tests := []struct {
		name       string
		dst        string
		sni        string
		wantReason policy.Reason
		wantHost   string
	}{
		{name: "allowed, destination given for the name", dst: "192.0.2.10", sni: "example.com", wantHost: "example.com"},
		{name: "allowed, steered to egressd", dst: "10.0.0.53", sni: "example.com", wantHost: "example.com"},
		{name: "destination not given for the name", dst: "192.0.2.20", sni: "example.com", wantReason: policy.ReasonDestinationMismatch, wantHost: "example.com"},
		{name: "resolved by the client itself", dst: "192.0.2.99", sni: "example.com", wantReason: policy.ReasonDestinationMismatch, wantHost: "example.com"},
		{name: "denied name", dst: "192.0.2.20", sni: "denied.example", wantReason: policy.ReasonNoMatchingRule, wantHost: "denied.example"},
		{name: "no sni", dst: "192.0.2.10", wantReason: policy.ReasonSNIRequired, wantHost: "192.0.2.10"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f.goingTo(t, tc.dst)
			n := f.audit.Len()
			c, err := net.Dial("tcp", f.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			cfg := &tls.Config{ServerName: tc.sni, RootCAs: roots}
			if tc.sni == "" {
				cfg.InsecureSkipVerify = true
			}
			tc2 := tls.Client(c, cfg)
			tc2.SetDeadline(time.Now().Add(10 * time.Second))
			herr := tc2.Handshake()
			if (herr == nil) != (tc.wantReason == "") {
				t.Fatalf("handshake error = %v; want refused %q", herr, tc.wantReason)
			}
			if herr != nil && !strings.Contains(herr.Error(), "access denied") {
				t.Errorf("handshake error = %v; want the access_denied alert", herr)
			}
			rec := f.lastConnect(t, n)
			if rec.Via != audit.ViaTransparent || rec.Host != tc.wantHost || strconv.Itoa(int(rec.Port)) != f.port ||
				(tc.wantReason == "") != (rec.Decision == audit.DecisionAllow) || (tc.wantReason != "" && rec.Reason != string(tc.wantReason)) {
				t.Errorf("record = %+v; want via transparent, %s:%s, reason %q", rec, tc.wantHost, f.port, tc.wantReason)
			}
		})
	}
}

// TestTransparentECH: an ECH extension (GREASE or not: its presence) is
// refused on an opaque rule, where the SNI is the only name egressd sees,
// and served on an inspecting one, which terminates TLS.
func TestTransparentECH(t *testing.T) {
	for _, tc := range []struct {
		name    string
		inspect bool
	}{{"opaque", false}, {"inspected", true}} {
		t.Run(tc.name, func(t *testing.T) {
			f := startTransparent(t, `{"rules": [{"id": "r", "hosts": ["example.com"], "ports": [PORT], "inspect": `+strconv.FormatBool(tc.inspect)+`}]}`)
			f.given.give("127.0.0.1", "example.com", "192.0.2.10")
			f.goingTo(t, "192.0.2.10")
			n := f.audit.Len()
			c, err := net.Dial("tcp", f.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write(withExtension(t, clientHello(t, "example.com"), tlsExtECH)); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			var first [1]byte
			_, rerr := io.ReadFull(c, first[:])
			if tc.inspect {
				// A ServerHello: the handshake goes on with egressd's leaf.
				if rerr != nil || first[0] != 0x16 {
					t.Fatalf("first byte from egressd = %#x, %v; want a handshake record", first[0], rerr)
				}
				return
			}
			if rerr == nil {
				t.Fatalf("egressd answered %#x to an ECH ClientHello on an opaque rule; want the connection closed", first[0])
			}
			f.audit.WaitRecord(t, func(r audit.Record) bool {
				return r.Kind == audit.KindConnect && r.Reason == string(policy.ReasonEncryptedClientHello) && r.Via == audit.ViaTransparent
			})
			if rec := f.lastConnect(t, n); rec.Decision != audit.DecisionAllow {
				t.Errorf("first record = %+v; want the allowed decision, then the first flight's refusal", rec)
			}
		})
	}
}

// TestTransparentHTTP decides a plain HTTP connection by its Host: a
// tunnel to that name on the original port, whose rule must allow plain
// bytes; a refusal is an HTTP response.
func TestTransparentHTTP(t *testing.T) {
	f := startTransparent(t, `{"rules": [
		{"id": "plain", "hosts": ["plain.example"], "ports": [PORT], "tls": false},
		{"id": "tls", "hosts": ["example.com"], "ports": [PORT]}
	]}`)
	f.given.give("127.0.0.1", "plain.example", "192.0.2.30")
	f.given.give("127.0.0.1", "example.com", "192.0.2.30")
	tests := []struct {
		name       string
		host       string
		wantStatus string
		wantReason policy.Reason
	}{
		// The fixture's upstream speaks TLS, and answers plain HTTP 400.
		{name: "allowed", host: "plain.example", wantStatus: "400"},
		{name: "denied name", host: "other.example", wantStatus: "403", wantReason: policy.ReasonNoMatchingRule},
		{name: "host names another port", host: "plain.example:1", wantStatus: "", wantReason: policy.ReasonTunnelHostMismatch},
		{name: "rule is tls-only", host: "example.com", wantStatus: "", wantReason: policy.ReasonTLSRequired},
	}
	f.goingTo(t, "192.0.2.30")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := f.audit.Len()
			c, err := net.Dial("tcp", f.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+tc.host+"\r\nConnection: close\r\n\r\n")
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			status := ""
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				status = strconv.Itoa(resp.StatusCode)
				resp.Body.Close()
			}
			if status != tc.wantStatus {
				t.Errorf("status = %q; want %q", status, tc.wantStatus)
			}
			if tc.wantReason == "" {
				if rec := f.lastConnect(t, n); rec.Decision != audit.DecisionAllow || rec.Via != audit.ViaTransparent {
					t.Errorf("record = %+v; want allowed via transparent", rec)
				}
				return
			}
			f.audit.WaitRecord(t, func(r audit.Record) bool {
				return r.Kind == audit.KindConnect && r.Reason == string(tc.wantReason) && r.Via == audit.ViaTransparent
			})
		})
	}
}

// TestTransparentIdentity: a transparent client is identified by its
// source address only; one that no source covers is refused, whatever it
// sends.
func TestTransparentIdentity(t *testing.T) {
	for _, tc := range []struct {
		name, cidr   string
		wantIdentity string
		wantReason   policy.Reason
	}{
		{"mapped source", "127.0.0.0/8", "sbx-2", ""},
		{"unmapped source", "10.9.0.0/16", "", policy.ReasonProxyAuthRequired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startTransparentAs(t, `{"rules": [{"id": "open", "hosts": ["example.com"], "ports": [PORT]}]}`,
				identity.Config{{ID: "sbx-2", Sources: []string{tc.cidr}}})
			f.goingTo(t, "10.0.0.53")
			c, err := net.Dial("tcp", f.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			tc2 := tls.Client(c, &tls.Config{ServerName: "example.com", InsecureSkipVerify: true})
			tc2.SetDeadline(time.Now().Add(10 * time.Second))
			_ = tc2.Handshake() // the record says what happened
			rec := f.lastConnect(t, 0)
			if rec.Identity != tc.wantIdentity || (tc.wantReason != "" && rec.Reason != string(tc.wantReason)) {
				t.Errorf("record = %+v; want identity %q, reason %q", rec, tc.wantIdentity, tc.wantReason)
			}
		})
	}
}

// TestTransparentInspected: an inspecting rule terminates a transparent
// connection's TLS as it does a CONNECT's, and each request inside is
// decided and recorded on its own, via "transparent".
func TestTransparentInspected(t *testing.T) {
	f := startTransparent(t, `{"rules": [{"id": "insp", "hosts": ["example.com"], "ports": [PORT], "methods": ["GET"], "paths": ["/ok/**"], "inspect": true}]}`)
	f.given.give("127.0.0.1", "example.com", "192.0.2.10")
	f.goingTo(t, "192.0.2.10")
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", f.addr)
		},
		TLSClientConfig: &tls.Config{RootCAs: f.ca.pool(t, "anonymous")},
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	for _, tc := range []struct {
		path   string
		status int
	}{{"/ok/a", http.StatusOK}, {"/no", http.StatusForbidden}} {
		resp, err := c.Get("https://example.com:" + f.port + tc.path)
		if err != nil {
			t.Fatalf("GET %s through the transparent listener: %v", tc.path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("GET %s = %d; want %d", tc.path, resp.StatusCode, tc.status)
		}
		rec := f.audit.WaitRecord(t, func(r audit.Record) bool { return r.Kind == audit.KindHTTP && r.Path == tc.path })
		if rec.Via != audit.ViaTransparent || !rec.Inspected {
			t.Errorf("record of %s = %+v; want inspected, via transparent", tc.path, rec)
		}
	}
}

// localConn is a connection that arrived at local.
type localConn struct {
	net.Conn
	local net.Addr
}

func (c localConn) LocalAddr() net.Addr { return c.local }

// TestDestinationPort: a connection redirected in egressd's namespace is
// decided on its original destination's port; one that arrived at the
// listener itself (a DNAT in the sandbox's namespace, a Service mapping
// 443 to the listener's port) on its protocol's port, never on the
// listener's, which no rule names.
func TestDestinationPort(t *testing.T) {
	listener := &net.TCPAddr{IP: net.ParseIP("10.0.0.53"), Port: 15001}
	tests := []struct {
		name string
		dst  string
		tls  bool
		want uint16
	}{
		{name: "redirected TLS", dst: "192.0.2.10:8443", tls: true, want: 8443},
		{name: "redirected HTTP", dst: "192.0.2.10:8080", want: 8080},
		{name: "steered to egressd's port 443", dst: "10.0.0.53:443", tls: true, want: 443},
		{name: "arrived at the listener, TLS", dst: "10.0.0.53:15001", tls: true, want: 443},
		{name: "arrived at the listener, HTTP", dst: "10.0.0.53:15001", want: 80},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := destinationPort(localConn{local: listener}, netip.MustParseAddrPort(tc.dst), tc.tls)
			if got != tc.want {
				t.Errorf("destinationPort(%s, tls %v) = %d; want %d", tc.dst, tc.tls, got, tc.want)
			}
		})
	}
}

// TestTransparentEarlyRefusalNamesIdentity: a connection refused on its
// first flight, before any decision (no SNI), is still recorded under the
// identity its source address maps to, so a reviewer filtering by
// identity sees it.
func TestTransparentEarlyRefusalNamesIdentity(t *testing.T) {
	f := startTransparentAs(t, `{"rules": [{"id": "open", "hosts": ["example.com"], "ports": [PORT]}]}`,
		identity.Config{{ID: "sbx-3", Sources: []string{"127.0.0.0/8"}}})
	f.goingTo(t, "10.0.0.53")
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true}) // no ServerName: no SNI
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	_ = tc.Handshake() // refused; the record says how
	rec := f.lastConnect(t, 0)
	if rec.Reason != string(policy.ReasonSNIRequired) || rec.Identity != "sbx-3" {
		t.Errorf("record = %+v; want sni_required under identity sbx-3", rec)
	}
}
