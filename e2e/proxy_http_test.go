package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/decisiontest"
)

func TestHTTPDecisions(t *testing.T) {
	w := newWorld(t, nil)
	c := w.E.Client("", "")
	tests := []struct {
		name       string
		method     string
		url        string
		wantStatus int
		wantReason string // for refusals
		wantRule   string
	}{
		{name: "allowed by name", method: "GET", url: w.url("upstream.test", "/echo"), wantStatus: 200, wantRule: "upstream"},
		{name: "allowed by ip literal", method: "GET", url: w.url("127.0.0.1", "/echo"), wantStatus: 200, wantRule: "upstream"},
		{name: "path rule allows its path", method: "GET", url: w.url("paths.test", "/allowed/a/b"), wantStatus: 200, wantRule: "upstream-paths"},
		{name: "path rule refuses other paths", method: "GET", url: w.url("paths.test", "/secret"), wantStatus: 403, wantReason: "no_matching_rule"},
		{name: "path rule refuses other methods", method: "POST", url: w.url("paths.test", "/allowed/a"), wantStatus: 403, wantReason: "no_matching_rule"},
		{name: "encoded separator", method: "GET", url: w.url("paths.test", "/allowed/..%2Fsecret"), wantStatus: 403},
		{name: "no rule", method: "GET", url: w.url("other.test", "/"), wantStatus: 403, wantReason: "no_matching_rule"},
		{name: "identity-scoped rule, anonymous", method: "GET", url: w.url("private.test", "/"), wantStatus: 403, wantReason: "no_matching_rule"},
		{name: "metadata literal", method: "GET", url: "http://169.254.169.254/latest/meta-data/", wantStatus: 403, wantReason: "metadata_address"},
		{name: "metadata by name", method: "GET", url: w.url("meta.test", "/"), wantStatus: 403, wantReason: "metadata_address"},
		{name: "loopback port not allowed", method: "GET", url: "http://127.0.0.1:1/", wantStatus: 403, wantReason: "internal_port_not_allowed"},
		{name: "one private answer denies the name", method: "GET", url: w.url("mixed.test", "/"), wantStatus: 403, wantReason: "private_address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, tt.url, strings.NewReader(""))
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("%s %s = %d %q; want %d", tt.method, tt.url, resp.StatusCode, body, tt.wantStatus)
			}
			id := resp.Header.Get("X-Egressd-Request")
			if tt.wantStatus != 200 {
				reason := decisiontest.Reason(resp.Header)
				if tt.wantReason != "" && reason != tt.wantReason {
					t.Errorf("reason = %q; want %q", reason, tt.wantReason)
				}
				if !strings.HasPrefix(string(body), "egressd: denied: "+reason+" (rule ") || strings.Contains(string(body), "127.0.0.1") {
					t.Errorf("body = %q; want the refusal text without addresses", body)
				}
				recs := w.E.WaitRecords(t, "deny "+id, func(r audit.Record) bool { return r.Request == id && r.Decision == "deny" })
				if recs[0].Reason != reason {
					t.Errorf("audit reason = %q; want %q", recs[0].Reason, reason)
				}
				return
			}
			recs := w.E.WaitRecords(t, "allow for "+tt.url, func(r audit.Record) bool {
				return r.Kind == "http" && r.Decision == "allow" && r.Method == tt.method && strings.Contains(tt.url, r.Host)
			})
			if recs[len(recs)-1].Rule != tt.wantRule {
				t.Errorf("audit rule = %q; want %q", recs[len(recs)-1].Rule, tt.wantRule)
			}
		})
	}
}

func TestHTTPDeniedWithoutInternalAllowance(t *testing.T) {
	w := newWorld(t, func(w *world) { w.Opts.YAML = "" })
	resp, err := w.E.Client("", "").Get(w.url("upstream.test", "/echo"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 || decisiontest.Reason(resp.Header) != "loopback_address" {
		t.Errorf("GET without internal: = %d %q; want 403 loopback_address", resp.StatusCode, decisiontest.Reason(resp.Header))
	}
}

func TestHTTPRebindingDenied(t *testing.T) {
	w := newWorld(t, nil)
	c := w.E.Client("", "")
	got := map[string]int{}
	for range 4 {
		resp, err := c.Get(w.url("rebind.test", "/close"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got[resp.Status+" "+decisiontest.Reason(resp.Header)]++
	}
	// The name answers 127.0.0.1 and 10.0.0.5 in turn (TTL 0): the allowed
	// answer passes, the rebound one is refused at dial time.
	if got["200 OK "] == 0 || got["403 Forbidden private_address"] == 0 {
		t.Errorf("statuses over 4 requests = %v; want both 200 and 403 private_address", got)
	}
}

func TestHTTPRequestTargetForwardedExactly(t *testing.T) {
	w := newWorld(t, nil)
	target := "/echo/%7euser/a%20b/%41%e2%82%ac/x,y@z?q=%2F%2f&r=a+b&s"
	req := "GET http://upstream.test:" + itoa(w.HTTP.Port) + target + " HTTP/1.1\r\n" +
		"Host: upstream.test:" + itoa(w.HTTP.Port) + "\r\n" +
		"Connection: keep-alive, X-Hop\r\n" +
		"X-Hop: must-not-pass\r\n" +
		"Keep-Alive: timeout=5\r\n" +
		"Proxy-Authorization: Basic c2J4OnRva2Vu\r\n" +
		"X-End: kept\r\n\r\n"
	resp, body := rawRequest(t, w.E.ProxyAddr, req)
	if resp.StatusCode != 200 {
		t.Fatalf("status = %d %q; want 200", resp.StatusCode, body)
	}
	if first, _, _ := strings.Cut(body, "\n"); first != "GET "+target+" HTTP/1.1" {
		t.Errorf("upstream request line = %q; want %q", first, "GET "+target+" HTTP/1.1")
	}
	for _, bad := range []string{"x-hop", "keep-alive", "proxy-authorization", "c2J4OnRva2Vu"} {
		if strings.Contains(strings.ToLower(body), bad) {
			t.Errorf("upstream saw %q:\n%s", bad, body)
		}
	}
	if !strings.Contains(body, "x-end: kept") {
		t.Errorf("upstream did not see end-to-end header X-End:\n%s", body)
	}
	if strings.Contains(w.E.Log(), "c2J4OnRva2Vu") {
		t.Errorf("operational log contains the proxy credential")
	}
}

func TestHTTPMalformed(t *testing.T) {
	w := newWorld(t, nil)
	tests := []struct {
		name, req  string
		wantStatus int
		wantReason string
	}{
		{"absolute https", "GET https://example.com:" + itoa(w.HTTPS.Port) + "/ HTTP/1.1\r\nHost: example.com\r\n\r\n", 400, "https_requires_connect"},
		{"ftp scheme", "GET ftp://upstream.test/ HTTP/1.1\r\nHost: upstream.test\r\n\r\n", 400, "unsupported_scheme"},
		{"origin form", "GET /echo HTTP/1.1\r\nHost: upstream.test\r\n\r\n", 400, "not_proxy_request"},
		{"userinfo", "GET http://u:p@upstream.test:" + itoa(w.HTTP.Port) + "/ HTTP/1.1\r\nHost: upstream.test\r\n\r\n", 403, "userinfo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := rawRequest(t, w.E.ProxyAddr, tt.req)
			if resp.StatusCode != tt.wantStatus || decisiontest.Reason(resp.Header) != tt.wantReason {
				t.Errorf("%s = %d %q (%q); want %d %q", firstLine(tt.req), resp.StatusCode, decisiontest.Reason(resp.Header), body, tt.wantStatus, tt.wantReason)
			}
			id := resp.Header.Get("X-Egressd-Request")
			w.E.WaitRecords(t, "refusal "+id, func(r audit.Record) bool { return r.Request == id && r.Reason == tt.wantReason })
		})
	}
}

func TestRedirects(t *testing.T) {
	w := newWorld(t, nil)
	c := w.E.Client("", "")
	tests := []struct {
		name       string
		to         string
		wantStatus int
		wantReason string
	}{
		{"allowed target", w.url("upstream.test", "/echo"), 302, ""},
		{"relative target", "/echo", 302, ""},
		{"denied target", "http://elsewhere.test/steal", 403, "redirect_denied"},
		{"metadata target", "http://169.254.169.254/latest/", 403, "redirect_denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.Get(w.url("upstream.test", "/redirect?to="+urlQueryEscape(tt.to)))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus || decisiontest.Reason(resp.Header) != tt.wantReason {
				t.Fatalf("redirect to %s = %d %q; want %d %q", tt.to, resp.StatusCode, decisiontest.Reason(resp.Header), tt.wantStatus, tt.wantReason)
			}
			id := resp.Header.Get("X-Egressd-Request")
			want := audit.DecisionAllow
			if tt.wantStatus == 403 {
				want = audit.DecisionDeny
				id = strings.TrimSpace(id)
			}
			w.E.WaitRecords(t, "redirect decision", func(r audit.Record) bool {
				return r.Kind == "redirect" && r.Decision == want && (want == audit.DecisionAllow || r.Request == id)
			})
		})
	}
}
