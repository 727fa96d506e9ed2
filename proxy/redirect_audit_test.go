package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/policy"
)

// TestRedirectUnparseableLocationAuditDown: a 3xx whose Location does not
// parse is refused, and when its record cannot be written the refusal says
// audit_unavailable (503), as for every other redirect decision. The
// refusal used to ignore the failed append and answer 403 redirect_denied,
// a deny with no record behind it.
func TestRedirectUnparseableLocationAuditDown(t *testing.T) {
	a := &audittest.Recorder{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The request's own decision is recorded by now; the redirect's
		// is the first to fail.
		a.SetFail(true)
		w.Header().Set("Location", "http://[unclosed/")
		w.WriteHeader(http.StatusFound)
	}))
	defer up.Close()
	c := proxyClient(startProxy(t, DefaultConfig(), denyHost{}, a))
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Get(up.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := "deny; reason=" + string(policy.ReasonAuditUnavailable); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Egressd-Decision") != want {
		t.Errorf("GET with an unparseable Location, audit down = %d %q; want 503 %q", resp.StatusCode, resp.Header.Get("X-Egressd-Decision"), want)
	}
}

// TestRedirectRecordScrubbed: an upstream of a credential rule that puts
// the injected secret into a redirect's Location (path and query) gets a
// redirect record that names the secret, never holds it: the audit file's
// bytes do not contain the value. The record used to copy the Location's
// path and query as they were.
func TestRedirectRecordScrubbed(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		w.Header().Set("Location", "/next/"+v+"/x?k="+v+"&q=1")
		w.WriteHeader(http.StatusFound)
	}))
	t.Cleanup(up.Close)
	d := credDecider{"127.0.0.1": allowWith("gh", policy.Credential{Secret: "github", Header: "Authorization", Format: "Bearer {}"})}
	addr, lines, logs := credProxy(t, d, nil)
	c := proxyClient(addr)
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Get(up.URL + "/start")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("GET = %d; want the 302 passed on", resp.StatusCode)
	}
	var redirect string
	for _, l := range lines() {
		if strings.Contains(l, `"kind":"redirect"`) {
			redirect = l
		}
	}
	if !strings.Contains(redirect, `"path":"/next/«egressd:redacted:github»/x"`) ||
		!strings.Contains(redirect, `k=«egressd:redacted:github»`) {
		t.Errorf("redirect record %s; want path and query with the secret named, not held", redirect)
	}
	assertNoSecret(t, lines, logs, resp.Header.Get("Location"))
}
