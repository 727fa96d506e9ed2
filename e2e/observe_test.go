package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/dnsguard/dnstest"
	"github.com/egressd/egressd/internal/decisiontest"
)

// TestObserveMode is issue 24 item 1 through the binary: under a bundle in
// observe mode, with a deny rule of its own in observe mode, requests the
// rules would deny reach the upstream and their records say would_deny
// (and which mode), `audit show --would-deny` lists exactly those, and the
// metric counts them; the address floor still refuses metadata and
// loopback addresses, without would_deny.
func TestObserveMode(t *testing.T) {
	up := StartHTTP(t)
	dns := dnstest.Start(t)
	for _, n := range []string{"watched.test", "other.test"} {
		dns.SetRR(n, n+". 60 IN A 127.0.0.1")
	}
	dns.SetRR("meta.test", "meta.test. 60 IN A 169.254.169.254")
	dir := WritePolicy(t, nil)
	data, err := json.Marshal(map[string]any{"mode": "observe", "rules": []Rule{
		{ID: "watch", Hosts: []string{"watched.test"}, Ports: []int{up.Port}, Action: "deny", Mode: "observe"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	e := Start(t, Options{PolicyDir: dir, DNS: dns.Addr(), YAML: InternalAllow(up.Addr)})
	c := e.Client("", "")

	tests := []struct {
		name       string
		url        string
		wantStatus int
		reason     string // of a refusal
		wouldDeny  string
		by         string
	}{
		{"observed rule", fmt.Sprintf("http://watched.test:%d/observed", up.Port), 200, "", "rule_deny", "rule"},
		{"observed bundle", fmt.Sprintf("http://other.test:%d/observed", up.Port), 200, "", "no_matching_rule", "bundle"},
		{"metadata literal", "http://169.254.169.254/latest/meta-data/", 403, "metadata_address", "", ""},
		{"metadata by name", fmt.Sprintf("http://meta.test:%d/", up.Port), 403, "metadata_address", "", ""},
		{"loopback without an internal rule", fmt.Sprintf("http://[::1]:%d/", up.Port), 403, "loopback_address", "", ""},
		{"loopback port without an internal rule", "http://127.0.0.1:1/", 403, "internal_port_not_allowed", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := c.Get(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("GET %s = %d %q; want %d", tt.url, resp.StatusCode, body, tt.wantStatus)
			}
			if tt.wantStatus == 200 && !strings.HasPrefix(string(body), "GET /observed HTTP/1.1") {
				t.Errorf("GET %s answered %q; want the upstream's echo", tt.url, body)
			}
			if tt.reason != "" && decisiontest.Reason(resp.Header) != tt.reason {
				t.Errorf("GET %s refused %q; want %s", tt.url, decisiontest.Reason(resp.Header), tt.reason)
			}
			if tt.wantStatus == 200 {
				host := strings.Split(strings.TrimPrefix(tt.url, "http://"), ":")[0]
				r := e.WaitRecords(t, "allowing "+tt.url, func(r audit.Record) bool {
					return r.Kind == audit.KindHTTP && r.Host == host && r.Decision == audit.DecisionAllow
				})[0]
				if r.Reason != "allowed" || r.WouldDeny != tt.wouldDeny || r.ObservedBy != tt.by {
					t.Errorf("record %+v; want allowed with would_deny %q observed_by %q", r, tt.wouldDeny, tt.by)
				}
				return
			}
			// The refusal: the floor's, at the decision (a literal) or at
			// the dial (a name, after the policy's observed allow).
			id := resp.Header.Get("X-Egressd-Request")
			r := e.WaitRecords(t, "refusing "+id, func(r audit.Record) bool { return r.Request == id && r.Decision == audit.DecisionDeny })[0]
			if r.Reason != tt.reason || r.WouldDeny != "" || r.ObservedBy != "" {
				t.Errorf("refusal record %+v; want reason %s without would_deny", r, tt.reason)
			}
		})
	}

	// meta.test's decision was observed too: the floor refused its dial,
	// and its http_done record says so.
	out, errOut, code := RunCLI(t, "audit", "show", "--json", "--would-deny", e.AuditDir)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.Contains(out, `"host":"watched.test"`) || !strings.Contains(out, `"host":"other.test"`) ||
		strings.Contains(out, `"decision":"deny"`) {
		t.Errorf("audit show --would-deny = %d, %q (stderr %q); want the three observed decisions", code, out, errOut)
	}
	metrics := e.Metrics(t)
	for _, series := range []string{
		`egressd_would_deny_total{kind="http",observed_by="rule",reason="rule_deny"} 1`,
		`egressd_would_deny_total{kind="http",observed_by="bundle",reason="no_matching_rule"} 2`,
	} {
		if !strings.Contains(metrics, series) {
			t.Errorf("metrics lack %s", series)
		}
	}
	if code, _, _ := e.Admin(http.MethodGet, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d; want 200", code)
	}
}
