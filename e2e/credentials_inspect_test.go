package e2e

import (
	"crypto/tls"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/decisiontest"
)

// tlsRecordingUpstream is recordingUpstream over TLS (HTTP/1.1 and h2),
// with its certificate written to a PEM file for inspect.upstream_ca_file.
// httptest's certificate names example.com and 127.0.0.1.
func tlsRecordingUpstream(t *testing.T) (up *Upstream, got chan seen, hits *atomic.Int64) {
	t.Helper()
	got = make(chan seen, 64)
	hits = new(atomic.Int64)
	up = StartTLSHandler(t, recordingHandler(got, hits, "text/event-stream", "data: start\n\n", "data: %s\n\n"), true)
	return up, got, hits
}

// TestCredentialBrokeringInspected: inside an inspected HTTPS tunnel the
// bound host gets the secret (HTTP/1.1 and h2), a rule on a public name is
// accepted because of inspect, the echo comes back scrubbed, a
// placeholder for another secret is refused inside the tunnel, and no
// log or record holds a value.
func TestCredentialBrokeringInspected(t *testing.T) {
	up, got, hits := tlsRecordingUpstream(t)
	port := up.Port
	in := newInspecting(t, up)
	_, secrets := brokerSecrets(t)
	rules := []Rule{{ID: "gh-inspected", Hosts: []string{"example.com"}, Ports: []int{port}, Inspect: true,
		Credentials: []map[string]any{cred("secret", "github", "header", "Authorization", "format", "Bearer {}")}}}
	roots := exportedRoots(t, in.CADir, "--identity", "anonymous")
	e := Start(t, Options{YAML: in.YAML + secrets, PolicyDir: WritePolicy(t, rules), DNS: in.DNS.Addr(), Env: brokerEnv})
	var texts []string
	for _, h2 := range []bool{false, true} {
		name := "http1.1"
		if h2 {
			name = "h2"
		}
		t.Run(name, func(t *testing.T) {
			tr := &http.Transport{Proxy: http.ProxyURL(e.ProxyURL("", "")), TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: h2}
			if !h2 {
				tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
			}
			client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
			req, _ := http.NewRequest("GET", "https://example.com:"+strconv.Itoa(port)+"/repos", nil)
			req.Header.Set("Authorization", "Bearer sandbox-own")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			texts = append(texts, string(body), resp.Header.Get("X-Echo"))
			if h2 != (resp.ProtoMajor == 2) {
				t.Errorf("client spoke %s; want h2 %v", resp.Proto, h2)
			}
			select {
			case s := <-got:
				if s.Authorization != "Bearer "+githubV1 {
					t.Errorf("upstream Authorization = %q; want the github secret", s.Authorization)
				}
			default:
				t.Fatalf("upstream received nothing: %d %s", resp.StatusCode, body)
			}
			if resp.StatusCode != 200 || !strings.Contains(string(body), "«egressd:redacted:github»") {
				t.Errorf("response %d %q; want the echo scrubbed", resp.StatusCode, body)
			}

			before := hits.Load()
			req, _ = http.NewRequest("GET", "https://example.com:"+strconv.Itoa(port)+"/repos", nil)
			req.Header.Set("X-Api-Key", "egressd:secret:openai")
			resp, err = client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 403 || decisiontest.Reason(resp.Header) != "credential_wrong_destination" {
				t.Errorf("placeholder of another secret: %d %q; want 403 credential_wrong_destination", resp.StatusCode, decisiontest.Reason(resp.Header))
			}
			if hits.Load() != before {
				t.Errorf("the refused request reached the upstream")
			}
		})
	}
	if err := e.Stop(10 * time.Second); err != nil {
		t.Logf("stop: %v", err)
	}
	VerifyAudit(t, e)
	assertNoSecretAnywhere(t, append(texts, e.Log()), []string{e.AuditDir, filepath.Dir(e.ConfigPath)}, githubV1, openaiV)
}
