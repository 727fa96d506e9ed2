package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http/httpproxy"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/decisiontest"
)

// run runs a client program with a bounded time and returns its stdout.
func run(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = cleanEnv()
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), fmt.Errorf("%v: %s", err, ee.Stderr)
	}
	return string(out), err
}

func TestCurl(t *testing.T) {
	w := newWorld(t, nil)
	proxy := "http://" + w.E.ProxyAddr
	tests := []struct {
		name string
		args []string
		want string // "<status>" or "<status> <reason>"
	}{
		{"plain http allowed", []string{"-x", proxy, w.url("upstream.test", "/bytes/1024")}, "200"},
		{"plain http denied", []string{"-x", proxy, w.url("other.test", "/")}, "403 no_matching_rule"},
		{"https through CONNECT", []string{"-x", proxy, "--cacert", w.HTTPS.CAFile, fmt.Sprintf("https://example.com:%d/echo", w.HTTPS.Port)}, "200"},
		{"https CONNECT denied", []string{"-x", proxy, "--cacert", w.HTTPS.CAFile, fmt.Sprintf("https://pathonly.test:%d/x/y", w.HTTPS.Port)}, "403 tunnel_needs_host_wide_rule"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// %{http_code} is the tunnel's answer when CONNECT is refused,
			// and the origin's otherwise; the decision header is printed
			// by -D - for both.
			args := append([]string{"-sS", "-o", "/dev/null", "-D", "-", "-w", "code=%{http_code} connect=%{http_connect}\n", "--max-time", "20"}, tt.args...)
			out, err := run(t, "curl", args...)
			status, reason, _ := strings.Cut(tt.want, " ")
			if reason != "" {
				if !strings.Contains(out, "reason="+reason) {
					t.Errorf("curl %v:\n%s\nwant reason %s (err %v)", tt.args, out, reason, err)
				}
				return
			}
			if err != nil || !strings.Contains(out, "code="+status) {
				t.Errorf("curl %v = %q, %v; want code=%s", tt.args, out, err, status)
			}
		})
	}
}

func TestGoClientFromEnvironment(t *testing.T) {
	w := newWorld(t, nil)
	t.Setenv("HTTP_PROXY", "http://"+w.E.ProxyAddr)
	// http.ProxyFromEnvironment caches the environment once per process;
	// httpproxy is the same logic, read now.
	pf := httpproxy.FromEnvironment().ProxyFunc()
	tr := &http.Transport{Proxy: func(r *http.Request) (*url.URL, error) { return pf(r.URL) }}
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := c.Get(w.url("upstream.test", "/bytes/1024"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ContentLength != 1024 {
		t.Errorf("GET via HTTP_PROXY = %d (%d bytes); want 200 (1024)", resp.StatusCode, resp.ContentLength)
	}
}

func TestPythonURLLib(t *testing.T) {
	w := newWorld(t, nil)
	script := `
import sys, urllib.request, urllib.error
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": sys.argv[1]}))
for url in sys.argv[2:]:
    try:
        r = opener.open(url, timeout=10)
        print(r.status, len(r.read()))
    except urllib.error.HTTPError as e:
        print(e.code, e.headers.get("X-Egressd-Decision"))
`
	out, err := run(t, "python3", "-c", script, "http://"+w.E.ProxyAddr,
		w.url("upstream.test", "/bytes/2048"), w.url("other.test", "/"))
	if err != nil {
		t.Fatalf("python3: %v\n%s", err, out)
	}
	want := "200 2048\n403 deny; reason=no_matching_rule\n"
	if out != want {
		t.Errorf("python urllib output = %q; want %q", out, want)
	}
}

// TestPythonJSONDenial: an agent that asks for JSON reads its refusal as
// JSON with Python's own parser: the reason, its class, what it can do,
// and the request id its record and X-Egressd-Request carry; nothing
// about other rules or hosts.
func TestPythonJSONDenial(t *testing.T) {
	w := newWorld(t, nil)
	script := `
import json, sys, urllib.request, urllib.error
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": sys.argv[1]}))
req = urllib.request.Request(sys.argv[2], headers={"Accept": "application/json"})
try:
    opener.open(req, timeout=10)
    print("allowed")
except urllib.error.HTTPError as e:
    d = json.loads(e.read())
    print(e.code, e.headers.get("Content-Type"), e.headers.get("X-Egressd-Request") == d["request"])
    print(d["denied"], d["reason"], d["class"], d["action"], d["request"])
    print(d["message"])
`
	out, err := run(t, "python3", "-c", script, "http://"+w.E.ProxyAddr, w.url("other.test", "/x"))
	if err != nil {
		t.Fatalf("python3: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || lines[0] != "403 application/json True" {
		t.Fatalf("python output %q; want a 403 JSON refusal whose request matches X-Egressd-Request", out)
	}
	f := strings.Fields(lines[1])
	if len(f) != 5 || f[0] != "True" || f[1] != "no_matching_rule" || f[2] != "policy" || f[3] != "request_grant" {
		t.Errorf("denial %q; want True no_matching_rule policy request_grant ID", lines[1])
	}
	if strings.Contains(lines[2], "upstream.test") || !strings.Contains(lines[2], "grant") {
		t.Errorf("message %q; want how to ask for a grant, naming no allowed host", lines[2])
	}
	recs := w.E.WaitRecords(t, "of the refusal", func(r audit.Record) bool { return r.Kind == audit.KindHTTP && r.Host == "other.test" })
	if len(f) == 5 && recs[0].Request != f[4] {
		t.Errorf("record request %q; the agent read %q", recs[0].Request, f[4])
	}
}

func TestProxyAuthentication(t *testing.T) {
	sum := sha256.Sum256([]byte("tok-1"))
	w := newWorld(t, func(w *world) {
		w.Opts.YAML += "identities:\n  - id: sbx-1\n    token_sha256: " + hex.EncodeToString(sum[:]) +
			"\n  - id: sbx-mapped\n    sources: [127.0.0.2/32]\n"
	})
	tests := []struct {
		name, user, token string
		url               string
		wantStatus        int
		wantReason        string
	}{
		{"no credentials", "", "", w.url("upstream.test", "/echo"), 407, "proxy_auth_required"},
		{"wrong token", "sbx-1", "nope", w.url("upstream.test", "/echo"), 407, "proxy_auth_invalid"},
		{"unknown id", "sbx-9", "tok-1", w.url("upstream.test", "/echo"), 407, "proxy_auth_invalid"},
		{"good token", "sbx-1", "tok-1", w.url("upstream.test", "/echo"), 200, ""},
		{"identity-scoped rule", "sbx-1", "tok-1", w.url("private.test", "/echo"), 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := w.E.Client(tt.user, tt.token).Get(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(resp)
			if resp.StatusCode != tt.wantStatus || decisiontest.Reason(resp.Header) != tt.wantReason {
				t.Fatalf("GET as %q = %d %q; want %d %q", tt.user, resp.StatusCode, decisiontest.Reason(resp.Header), tt.wantStatus, tt.wantReason)
			}
			if tt.wantStatus == 407 && resp.Header.Get("Proxy-Authenticate") == "" {
				t.Errorf("407 without Proxy-Authenticate")
			}
			if strings.Contains(strings.ToLower(body), "proxy-authorization") {
				t.Errorf("upstream saw Proxy-Authorization:\n%s", body)
			}
		})
	}
	t.Run("CONNECT without credentials", func(t *testing.T) {
		_, resp := connect(t, w.E.ProxyAddr, fmt.Sprintf("example.com:%d", w.HTTPS.Port), "")
		if resp.StatusCode != 407 || resp.Header.Get("Proxy-Authenticate") == "" {
			t.Errorf("CONNECT = %d (Proxy-Authenticate %q); want 407 with a challenge", resp.StatusCode, resp.Header.Get("Proxy-Authenticate"))
		}
	})
	t.Run("curl answers the challenge", func(t *testing.T) {
		out, err := run(t, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "20",
			"-x", "http://"+w.E.ProxyAddr, "--proxy-user", "sbx-1:tok-1", "--cacert", w.HTTPS.CAFile,
			fmt.Sprintf("https://example.com:%d/echo", w.HTTPS.Port))
		if err != nil || out != "200" {
			t.Errorf("curl --proxy-user = %q, %v; want 200", out, err)
		}
	})
	t.Run("source mapping", func(t *testing.T) {
		out, err := run(t, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "20",
			"--interface", "127.0.0.2", "-x", "http://"+w.E.ProxyAddr, w.url("upstream.test", "/echo"))
		if err != nil || out != "200" {
			t.Errorf("curl from 127.0.0.2 = %q, %v; want 200", out, err)
		}
		w.E.WaitRecords(t, "mapped identity", func(r audit.Record) bool { return r.Identity == "sbx-mapped" && r.Decision == "allow" })
	})
	if strings.Contains(w.E.Log(), "tok-1") || strings.Contains(w.E.Log(), "c2J4LTE6dG9rLTE") {
		t.Errorf("operational log contains a proxy token")
	}
	for _, r := range w.E.Records(t) {
		if strings.Contains(fmt.Sprint(r), "tok-1") {
			t.Errorf("audit record contains a proxy token: %+v", r)
		}
	}
}
