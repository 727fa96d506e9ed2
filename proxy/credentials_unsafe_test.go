package proxy

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/egressd/egressd/internal/decisiontest"
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
				if resp.StatusCode != http.StatusForbidden || decisiontest.Of(resp.Header) != (decisiontest.Decision{Verdict: "deny", Reason: string(policy.ReasonCredentialUnsafeRequest), Rule: "gh"}) {
					t.Errorf("%s = %d %q; want 403 credential_unsafe_request", tt.name, resp.StatusCode, decisiontest.Reason(resp.Header))
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

// TestCredentialNonTextBodies: a body the scrubber does not rewrite is
// searched whatever its label. With a declared length it is refused 502
// credential_unscrubbable before its head; streamed, it is cut before the
// secret (where the client sees the body end) and its completion record
// says credential_unscrubbable; a
// body's trailers (gRPC's grpc-message) are scrubbed like headers. The
// secret used to pass in each.
func TestCredentialNonTextBodies(t *testing.T) {
	tests := []struct {
		name, ctype string
		gzip        bool
		streamed    bool
	}{
		{name: "image", ctype: "image/png"},
		{name: "message/http", ctype: "message/http"},
		{name: "unlabelled gzip", ctype: "application/octet-stream", gzip: true},
		{name: "streamed", ctype: "application/octet-stream", streamed: true},
		{name: "streamed unlabelled gzip", ctype: "text/plain", gzip: true, streamed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body := []byte(strings.Repeat("x", 100) + r.Header.Get("Authorization"))
				if tt.gzip {
					var b bytes.Buffer
					zw := gzip.NewWriter(&b)
					zw.Write(body)
					zw.Close()
					body = b.Bytes()
				}
				w.Header().Set("Content-Type", tt.ctype)
				if tt.streamed {
					w.Write(body[:10])
					w.(http.Flusher).Flush()
					w.Write(body[10:])
					return
				}
				w.Header().Set("Content-Length", fmt.Sprint(len(body)))
				w.Write(body)
			}))
			t.Cleanup(up.Close)
			d := credDecider{"127.0.0.1": allowWith("gh", policy.Credential{Secret: "github", Header: "Authorization"})}
			addr, lines, logs := credProxy(t, d, nil)
			resp, err := proxyClient(addr).Get(up.URL + "/blob")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			// A streamed body's head has gone when the secret is found:
			// the body ends there.
			if !tt.streamed && (resp.StatusCode != http.StatusBadGateway || !strings.HasPrefix(decisiontest.Reason(resp.Header), string(policy.ReasonCredentialUnscrubbable))) {
				t.Errorf("GET = %d %q; want 502 credential_unscrubbable", resp.StatusCode, decisiontest.Reason(resp.Header))
			}
			var done string
			for _, l := range lines() {
				if strings.Contains(l, `"kind":"http_done"`) {
					done = l
				}
			}
			if !strings.Contains(done, `"reason":"credential_unscrubbable"`) {
				t.Errorf("completion record %s; want reason credential_unscrubbable", done)
			}
			assertNoSecret(t, lines, logs, string(body))
		})
	}
}

// TestCredentialGRPCTrailersScrubbed: a gRPC answer (not text) of an
// inspected credential rule whose trailer echoes the secret reaches the
// client with the trailer scrubbed. Trailers of bodies that were not text
// used to pass as they were.
func TestCredentialGRPCTrailersScrubbed(t *testing.T) {
	f := startInspect(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
		w.Write([]byte{0, 0, 0, 0, 0})
		w.Header().Set("Grpc-Status", "16")
		w.Header().Set("Grpc-Message", "bad token "+r.Header.Get("Authorization"))
	}), inspectOptions{rules: credInspectRules, secrets: testStore(t)})
	req, _ := http.NewRequest(http.MethodPost, f.url("/svc/Method"), bytes.NewReader([]byte{0, 0, 0, 0, 0}))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	resp, err := f.client(t, true).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if msg := resp.Trailer.Get("Grpc-Message"); strings.Contains(msg, testSecret) || !strings.Contains(msg, "«egressd:redacted:github»") {
		t.Errorf("trailer Grpc-Message = %q; want the secret redacted", msg)
	}
}
