package proxy

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/decisiontest"
	"github.com/egressd/egressd/policy"
)

// TestInspectH2PathMalformed: an h2 :path holding a byte a request-target
// cannot hold (a space first: it would end the target in the HTTP/1.1
// request line sent upstream) is refused malformed_url with a 400 and an
// audited record of the path as sent; nothing reaches the upstream.
func TestInspectH2PathMalformed(t *testing.T) {
	var hits atomic.Int64
	f := startInspect(t, echoPath(&hits), inspectOptions{})
	c := f.client(t, true)
	for _, path := range []string{"/ok/a b", "/ok/a HTTP/1.1", "/ok/\"a\"", "/ok/{a}", "/ok/a^b", "/ok/caf\xc3\xa9", "/ok/a?q=%zz", "/ok/a\\b"} {
		t.Run(path, func(t *testing.T) {
			n := f.audit.Len()
			req, _ := http.NewRequest("GET", f.url(""), nil)
			req.URL.Opaque = "//example.com:" + f.port + path
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusBadRequest || decisiontest.Reason(resp.Header) != string(policy.ReasonMalformedURL) {
				t.Errorf("GET %q over HTTP/%d = %d %q; want 400 malformed_url", path, resp.ProtoMajor, resp.StatusCode, resp.Header.Get("X-Egressd-Decision"))
			}
			recs := f.audit.Wait(t, func(all []audit.Record) bool { return count(all[n:], audit.KindHTTP) > 0 })[n:]
			for _, r := range recs {
				if r.Kind == audit.KindHTTP && (r.Decision != audit.DecisionDeny || r.Reason != string(policy.ReasonMalformedURL) || !r.Inspected ||
					r.Path+"?"+r.Query != path+"?" && r.Path+"?"+r.Query != path) {
					t.Errorf("record %+v; want an inspected deny malformed_url of path %q", r, path)
				}
			}
		})
	}
	if hits.Load() != 0 {
		t.Errorf("upstream got %d requests; want none", hits.Load())
	}
}

// TestProxyDenyPathTrailingDots: through the proxy, a deny rule for
// /ok/secret/** refuses /ok/secret./x and /ok/secret%20/x, which a
// Windows-backed upstream serves as /ok/secret/x, and nothing reaches the
// upstream; a path beside it is still allowed.
func TestProxyDenyPathTrailingDots(t *testing.T) {
	var hits atomic.Int64
	f := startInspect(t, echoPath(&hits), inspectOptions{rules: `{"rules": [
		{"id": "no-secret", "hosts": ["example.com"], "ports": [PORT], "paths": ["/ok/secret/**"], "action": "deny"},
		{"id": "plain", "hosts": ["example.com"], "ports": [PORT], "methods": ["GET"], "paths": ["/ok/**"]}
	]}`})
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: f.proxy})}}
	for _, path := range []string{"/ok/secret/x", "/ok/secret./x", "/ok/secret%20/x", "/ok/SECRET.%20./x", "/ok/secret."} {
		resp, err := c.Get("http://example.com:" + f.port + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || decisiontest.Reason(resp.Header) != "rule_deny" {
			t.Errorf("GET %s = %d %q; want 403 rule_deny", path, resp.StatusCode, resp.Header.Get("X-Egressd-Decision"))
		}
	}
	if hits.Load() != 0 {
		t.Errorf("upstream got %d requests; want none", hits.Load())
	}
	n := f.audit.Len()
	resp, err := c.Get("http://example.com:" + f.port + "/ok/secret.x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	recs := f.audit.Wait(t, func(all []audit.Record) bool { return count(all[n:], audit.KindHTTP) > 0 })[n:]
	for _, r := range recs {
		if r.Kind == audit.KindHTTP && (r.Decision != audit.DecisionAllow || r.Rule != "plain") {
			t.Errorf("record %+v; want /ok/secret.x allowed by rule plain", r)
		}
	}
}

// TestInspectAcceptsECHWithOuterName: inside an inspected tunnel egressd
// terminates TLS, so an Encrypted Client Hello whose outer SNI is the
// CONNECT host is served for that host. A GREASE ECH (what Chromium sends
// on every connection) gets a ServerHello; a client with a real ECH config
// completes the handshake with the leaf of the outer (public) name and is
// told ECH was rejected (RFC 9849), never served the inner name.
func TestInspectAcceptsECHWithOuterName(t *testing.T) {
	var hits atomic.Int64
	f := startInspect(t, echoPath(&hits), inspectOptions{})
	target := "example.com:" + f.port

	// GREASE ECH (RFC 9849 section 6.2): an outer ECHClientHello with
	// random config_id, enc and payload.
	grease := []byte{0, 0, 1, 0, 1, 0x5a, 0, 32}
	grease = append(grease, bytes.Repeat([]byte{0xa5}, 32)...)
	grease = append(grease, 0, 144)
	grease = append(grease, bytes.Repeat([]byte{0x3c}, 144)...)
	c, br := openTunnel(t, f.proxy, target, "")
	c.Write(withExtensionData(t, clientHello(t, "example.com"), tlsExtECH, grease))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var hdr [tlsRecordHeaderLen + 1]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil || hdr[0] != tlsRecordHandshake || hdr[tlsRecordHeaderLen] != 2 {
		t.Fatalf("answer to a GREASE ECH hello % x, %v; want a ServerHello", hdr, err)
	}
	c.Close()

	// A real ECH config whose public name is the CONNECT host.
	key, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte{7, 0, 0x20, 0, 32}
	body = append(body, key.PublicKey().Bytes()...)
	body = append(body, 0, 4, 0, 1, 0, 1, 0, byte(len("example.com")))
	body = append(body, "example.com"...)
	body = append(body, 0, 0)
	cfg := binary.BigEndian.AppendUint16([]byte{0xfe, 0x0d}, uint16(len(body)))
	cfg = append(cfg, body...)
	list := binary.BigEndian.AppendUint16(nil, uint16(len(cfg)))
	list = append(list, cfg...)
	c, _ = openTunnel(t, f.proxy, target, "")
	tc := tls.Client(c, &tls.Config{ServerName: "inner.example", RootCAs: f.ca.pool(t, "anonymous"),
		MinVersion: tls.VersionTLS13, EncryptedClientHelloConfigList: list})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	var rejected *tls.ECHRejectionError
	if err := tc.Handshake(); !errors.As(err, &rejected) {
		t.Errorf("handshake with a real ECH config: %v; want an ECH rejection after the outer name's leaf verified", err)
	}
	tc.Close()

	recs := f.audit.Wait(t, func(all []audit.Record) bool { return count(all, audit.KindConnectDone) == 2 })
	for _, r := range recs {
		if (r.Kind == audit.KindConnect && (r.Decision != audit.DecisionAllow || r.Rule != "insp")) || r.Reason == string(policy.ReasonEncryptedClientHello) {
			t.Errorf("record %+v; want the tunnels allowed by insp and nothing refused for ECH", r)
		}
	}
	f.ca.mu.Lock()
	defer f.ca.mu.Unlock()
	for _, h := range f.ca.hosts {
		if h != "anonymous/example.com" {
			t.Errorf("minted a leaf for %s; want only the CONNECT host", h)
		}
	}
	if len(f.ca.hosts) != 2 {
		t.Errorf("minted %v; want one leaf per tunnel", f.ca.hosts)
	}
}
