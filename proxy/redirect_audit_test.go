package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
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
