package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// credInspectRules inspect example.com:PORT and add the github secret to
// every request as a Bearer token.
const credInspectRules = `{"rules": [
	{"id": "gh", "hosts": ["example.com"], "ports": [PORT], "methods": ["GET", "POST", "PUT", "TRACE"], "paths": ["/**"], "inspect": true,
	 "credentials": [{"secret": "github", "header": "Authorization", "format": "Bearer {}"}]}
]}`

// TestCredentialH2PostBody: an h2 POST with a body through an inspected
// credential rule gets the whole answer and a clean end of stream.
func TestCredentialH2PostBody(t *testing.T) {
	f := startInspect(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"got":"`+string(b)+`","auth":"`+r.Header.Get("Authorization")+`"}`)
	}), inspectOptions{rules: credInspectRules, secrets: testStore(t)})
	c := f.client(t, true)
	resp, err := c.Post(f.url("/post"), "application/json", strings.NewReader(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Fatalf("h2 POST = %d %s %q, read error %v; want 200 over h2, read to the end", resp.StatusCode, resp.Proto, body, err)
	}
	if strings.Contains(string(body), testSecret) || !strings.Contains(string(body), "«egressd:redacted:github»") {
		t.Errorf("body %q; want the echoed secret redacted", body)
	}
}
