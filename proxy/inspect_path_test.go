package proxy

import (
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/egressd/egressd/audit"
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
			if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusBadRequest || decisionReason(resp.Header) != string(policy.ReasonMalformedURL) {
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
		if resp.StatusCode != http.StatusForbidden || decisionReason(resp.Header) != "rule_deny" {
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
