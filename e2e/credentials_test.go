package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/dnsguard/dnstest"
	"github.com/egressd/egressd/internal/decisiontest"
)

// Secret values of the brokering tests: none may appear in any log,
// record or response.
const (
	githubV1 = "ghp_E2Efirst0123456789abcdefABCDEF"
	githubV2 = "ghp_E2Erotated9876543210fedcbaFEDCBA"
	openaiV  = "sk-E2Eopenai0123456789abcdefghij"
)

// seen is what a recording upstream received.
type seen struct {
	Path, Query, Authorization, APIKey string
}

// recordingUpstream listens on ip and records each request; it echoes what
// it received in a header and in a chunked body, so a leak back to the
// sandbox would show.
func recordingUpstream(t *testing.T, ip string) (addr string, port int, got chan seen, hits *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	got = make(chan seen, 64)
	hits = new(atomic.Int64)
	srv := httptest.NewUnstartedServer(recordingHandler(got, hits, "application/json", `{"a":"`, `%s"}`))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return ln.Addr().String(), ln.Addr().(*net.TCPAddr).Port, got, hits
}

// recordingHandler sends what each request carried to got and echoes it
// back in X-Echo and in a second body chunk (restFormat with the echo), so
// a leak back to the sandbox would show in either.
func recordingHandler(got chan<- seen, hits *atomic.Int64, contentType, first, restFormat string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		s := seen{Path: r.URL.Path, Query: r.URL.RawQuery, Authorization: r.Header.Get("Authorization"), APIKey: r.Header.Get("X-Api-Key")}
		got <- s
		echo := s.Authorization + " " + s.APIKey + " " + s.Query
		w.Header().Set("X-Echo", echo)
		w.Header().Set("Content-Type", contentType)
		io.WriteString(w, first)
		w.(http.Flusher).Flush() // chunked: the echo comes in a later chunk
		fmt.Fprintf(w, restFormat, echo)
	})
}

// brokerSecrets writes githubV1 to a secret file and returns it with the
// secrets: section naming it (github) and E2E_OPENAI_KEY (openai, set by
// brokerEnv).
func brokerSecrets(t *testing.T) (ghFile, yaml string) {
	t.Helper()
	ghFile = filepath.Join(t.TempDir(), "github_token")
	if err := os.WriteFile(ghFile, []byte(githubV1+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return ghFile, "secrets:\n  - name: github\n    file: " + ghFile + "\n  - name: openai\n    env: E2E_OPENAI_KEY\n"
}

// brokerEnv gives egressd the openai secret brokerSecrets names.
var brokerEnv = []string{"E2E_OPENAI_KEY=" + openaiV}

func cred(kv ...any) map[string]any {
	m := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

// TestCredentialBrokering runs every form (header template, header and
// query placeholder, Basic) and source (file, environment) through the
// binary to plain-HTTP upstreams an internal: entry allows: only the bound
// host sees a secret, a placeholder to another host is refused before it
// arrives, a literal key on a require rule is refused, echoes come back
// scrubbed, a rotated secret file applies on reload, and no log or record
// holds a value.
func TestCredentialBrokering(t *testing.T) {
	bound, bport, got, _ := recordingUpstream(t, "127.0.0.1")
	other, oport, _, otherHits := recordingUpstream(t, "127.0.0.2")
	ghFile, secrets := brokerSecrets(t)
	ip := "127.0.0.1"
	rules := []Rule{
		{ID: "gh", Hosts: []string{ip}, Ports: []int{bport}, Paths: []string{"/gh/**"},
			Credentials: []map[string]any{cred("secret", "github", "header", "Authorization", "format", "Bearer {}")}},
		{ID: "oa", Hosts: []string{ip}, Ports: []int{bport}, Paths: []string{"/oa/**"},
			Credentials: []map[string]any{cred("secret", "openai", "placeholder", "header:X-Api-Key", "require", true)}},
		{ID: "oa-query", Hosts: []string{ip}, Ports: []int{bport}, Paths: []string{"/q/**"},
			Credentials: []map[string]any{cred("secret", "openai", "placeholder", "query:api_key")}},
		{ID: "basic", Hosts: []string{ip}, Ports: []int{bport}, Paths: []string{"/basic/**"},
			Credentials: []map[string]any{cred("secret", "github", "basic", map[string]any{"user": "x-access-token"})}},
		{ID: "other", Hosts: []string{"127.0.0.2"}, Ports: []int{oport}},
	}
	o := Options{YAML: InternalAllow(bound, other) + secrets, PolicyDir: WritePolicy(t, rules), DNS: dnstest.Start(t).Addr(), Env: brokerEnv}
	e := Start(t, o)
	client := e.Client("", "")
	var bodies []string
	do := func(url string, header map[string]string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest("GET", url, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		bodies = append(bodies, string(b), resp.Header.Get("X-Echo"))
		return resp, string(b)
	}
	base := "http://" + bound
	received := func() seen {
		t.Helper()
		select {
		case s := <-got:
			return s
		default:
			t.Fatalf("the bound upstream received nothing")
			return seen{}
		}
	}

	t.Run("header template replaces the sandbox's Authorization", func(t *testing.T) {
		resp, body := do(base+"/gh/repos", map[string]string{"Authorization": "Bearer sandbox-own"})
		if s := received(); s.Authorization != "Bearer "+githubV1 {
			t.Errorf("upstream Authorization = %q; want the github secret", s.Authorization)
		}
		if resp.StatusCode != 200 || !strings.Contains(body, "«egressd:redacted:github»") || strings.Contains(resp.Header.Get("X-Echo"), githubV1) {
			t.Errorf("response %d %q, X-Echo %q; want the echo scrubbed", resp.StatusCode, body, resp.Header.Get("X-Echo"))
		}
	})
	t.Run("header placeholder", func(t *testing.T) {
		do(base+"/oa/chat", map[string]string{"X-Api-Key": "egressd:secret:openai"})
		if s := received(); s.APIKey != openaiV {
			t.Errorf("upstream X-Api-Key = %q; want the openai secret", s.APIKey)
		}
	})
	t.Run("query placeholder", func(t *testing.T) {
		do(base+"/q/search?x=1&api_key=egressd:secret:openai", nil)
		if s := received(); s.Query != "x=1&api_key="+openaiV {
			t.Errorf("upstream query = %q; want the openai secret swapped in", s.Query)
		}
	})
	t.Run("basic", func(t *testing.T) {
		do(base+"/basic/x", nil)
		want := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+githubV1))
		if s := received(); s.Authorization != want {
			t.Errorf("upstream Authorization = %q; want %q", s.Authorization, want)
		}
	})
	t.Run("literal key on a require rule", func(t *testing.T) {
		resp, _ := do(base+"/oa/chat", map[string]string{"X-Api-Key": "sk-pasted-real-key-0000"})
		if resp.StatusCode != 403 || decisiontest.Reason(resp.Header) != "credential_literal" {
			t.Errorf("status %d reason %q; want 403 credential_literal", resp.StatusCode, decisiontest.Reason(resp.Header))
		}
		if len(got) != 0 {
			t.Errorf("the upstream received the refused request: %+v", <-got)
		}
	})
	t.Run("placeholder to another allowed host", func(t *testing.T) {
		resp, _ := do("http://"+other+"/", map[string]string{"Authorization": "Bearer egressd:secret:github"})
		if resp.StatusCode != 403 || decisiontest.Reason(resp.Header) != "credential_wrong_destination" {
			t.Errorf("status %d reason %q; want 403 credential_wrong_destination", resp.StatusCode, decisiontest.Reason(resp.Header))
		}
		if n := otherHits.Load(); n != 0 {
			t.Errorf("the other host received %d requests; want none", n)
		}
	})
	t.Run("check names the action, not the value", func(t *testing.T) {
		out, stderr, code := RunCLI(t, "check", "http", "GET", base+"/gh/repos", "--config", e.ConfigPath)
		var res struct {
			Allow       bool `json:"allow"`
			Credentials []struct {
				Secret, Place string
			} `json:"credentials"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 {
			t.Fatalf("check = %d %q %s; want an allow", code, out, stderr)
		}
		if len(res.Credentials) != 1 || res.Credentials[0].Secret != "github" || res.Credentials[0].Place != "header:Authorization" {
			t.Errorf("check credentials = %+v; want github at header:Authorization", res.Credentials)
		}
		bodies = append(bodies, out, stderr)
	})
	t.Run("rotated file applies on reload", func(t *testing.T) {
		if err := os.WriteFile(ghFile, []byte(githubV2+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		e.Reload(t)
		resp, body := do(base+"/gh/repos", nil)
		if s := received(); s.Authorization != "Bearer "+githubV2 {
			t.Errorf("upstream Authorization after reload = %q; want the rotated secret", s.Authorization)
		}
		if strings.Contains(body, githubV2) || strings.Contains(resp.Header.Get("X-Echo"), githubV2) {
			t.Errorf("rotated secret echoed back: %q", body)
		}
	})

	recs := e.WaitRecords(t, "decision naming the github secret", func(r audit.Record) bool {
		return r.Rule == "gh" && r.Credentials["github"] == "header:Authorization"
	})
	if len(recs) == 0 {
		t.Errorf("no decision record names github at header:Authorization")
	}
	bodies = append(bodies, e.Metrics(t))
	if err := e.Stop(10 * time.Second); err != nil {
		t.Logf("stop: %v", err)
	}
	VerifyAudit(t, e)
	assertNoSecretAnywhere(t, append(bodies, e.Log()), []string{e.AuditDir, filepath.Dir(e.ConfigPath)}, githubV1, githubV2, openaiV)
}

// assertNoSecretAnywhere greps every file under dirs (audit segments, the
// operational log) and the texts for the values.
func assertNoSecretAnywhere(t *testing.T, texts, dirs []string, values ...string) {
	t.Helper()
	for _, d := range dirs {
		err := filepath.Walk(d, func(path string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("read %s: %v", path, err)
				return nil
			}
			texts = append(texts, path+"\x00"+string(b))
			return nil
		})
		if err != nil {
			t.Errorf("walk %s: %v", d, err)
		}
	}
	for _, s := range texts {
		for _, v := range values {
			if strings.Contains(s, v) {
				name, _, _ := strings.Cut(s, "\x00")
				t.Errorf("secret value found in %.80q", name)
			}
		}
	}
}

// TestCredentialCleartextRuleRefused: a bundle binding a secret to a
// public name over plain HTTP (port 80, no inspect, no internal: entry)
// is refused at load, by serve, by check and by the start-up checks
// (serve --check, policy check|test --config: issue 25), naming the rule.
func TestCredentialCleartextRuleRefused(t *testing.T) {
	rules := []Rule{{ID: "cleartext", Hosts: []string{"api.example.com"}, Ports: []int{80},
		Credentials: []map[string]any{cred("secret", "k", "header", "Authorization", "format", "Bearer {}")}}}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "egressd.yaml")
	yaml := "proxy:\n  listen: 127.0.0.1:" + strconv.Itoa(ReservePort(t).Port) + "\nadmin:\n  listen: 127.0.0.1:" + strconv.Itoa(ReservePort(t).Port) +
		"\naudit:\n  dir: " + filepath.Join(dir, "audit") + "\npolicy:\n  dir: " + WritePolicy(t, rules) +
		"\nsecrets:\n  - name: k\n    env: E2E_UNUSED_KEY\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	want := `rules[0] (rule "cleartext") binds credentials but would send them in cleartext: host "api.example.com" port 80`
	startChecks := [][]string{
		{"serve", "--check", "--config", cfg},
		{"policy", "check", "--config", cfg},
		{"policy", "test", "--config", cfg},
	}
	for _, args := range append([][]string{
		{"serve", "--config", cfg},
		{"check", "http", "GET", "http://api.example.com/", "--config", cfg},
	}, startChecks...) {
		_, stderr, code := RunCLI(t, args...)
		// serve says it on its JSON log line, check on plain stderr.
		quoted, _ := json.Marshal(want)
		if code != 2 || !strings.Contains(stderr, want) && !strings.Contains(stderr, string(quoted[1:len(quoted)-1])) {
			t.Errorf("egressd %s = exit %d, stderr %q; want 2 naming the rule", args[0], code, stderr)
		}
	}
	// A secret name the config does not list is refused the same way.
	if err := os.WriteFile(cfg, []byte(strings.Replace(yaml, "name: k", "name: other", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	want = `rules[0].credentials[0].secret "k" is not in the config's secrets: (rule "cleartext")`
	quoted, _ := json.Marshal(want)
	for _, args := range append([][]string{{"check", "http", "GET", "http://api.example.com/", "--config", cfg}}, startChecks...) {
		if _, stderr, code := RunCLI(t, args...); code != 2 || !strings.Contains(stderr, want) && !strings.Contains(stderr, string(quoted[1:len(quoted)-1])) {
			t.Errorf("egressd %s = exit %d, stderr %q; want 2 naming the secret and rule", strings.Join(args[:2], " "), code, stderr)
		}
	}
}
