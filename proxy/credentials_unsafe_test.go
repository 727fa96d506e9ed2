package proxy

import (
	"io"
	"net/http"
	"testing"

	"github.com/egressd/egressd/policy"
)

// TestCredentialUnsafeRequests: on a rule that binds a secret, TRACE
// (answered with the request echoed as message/http, Authorization and
// all) is refused before anything is sent, and so is a Range or If-Range
// unless an action of the rule sets allow_range; with it the range is
// sent. They used to be sent, and the echo or its pieces reached the
// sandbox unscrubbed.
func TestCredentialUnsafeRequests(t *testing.T) {
	tests := []struct {
		name       string
		method     string
		header     string
		allowRange bool
		refused    bool
	}{
		{name: "TRACE", method: http.MethodTrace, refused: true},
		{name: "TRACE, allow_range", method: http.MethodTrace, allowRange: true, refused: true},
		{name: "Range", method: http.MethodGet, header: "Range", refused: true},
		{name: "If-Range", method: http.MethodGet, header: "If-Range", refused: true},
		{name: "Range, allow_range", method: http.MethodGet, header: "Range", allowRange: true},
		{name: "plain GET", method: http.MethodGet},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up, _, hits := echoUpstream(t, "127.0.0.1")
			d := credDecider{"127.0.0.1": allowWith("gh", policy.Credential{Secret: "github", Header: "Authorization", AllowRange: tt.allowRange})}
			addr, lines, logs := credProxy(t, d, nil)
			req, _ := http.NewRequest(tt.method, "http://"+up+"/file", nil)
			if tt.header != "" {
				req.Header.Set(tt.header, "bytes=0-3")
			}
			resp, err := proxyClient(addr).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if tt.refused {
				if resp.StatusCode != http.StatusForbidden || reasonOf(resp.Header) != string(policy.ReasonCredentialUnsafeRequest)+"; rule=gh" {
					t.Errorf("%s = %d %q; want 403 credential_unsafe_request", tt.name, resp.StatusCode, reasonOf(resp.Header))
				}
				if n := hits.Load(); n != 0 {
					t.Errorf("upstream received %d requests; want none", n)
				}
			} else if resp.StatusCode != http.StatusOK || hits.Load() != 1 {
				t.Errorf("%s = %d, %d upstream requests; want 200 sent once", tt.name, resp.StatusCode, hits.Load())
			}
			assertNoSecret(t, lines, logs, string(body))
		})
	}
}
