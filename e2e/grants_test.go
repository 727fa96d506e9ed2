package e2e

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
)

// grantWorld is the proxy tests' world with an admin client "approver"
// holding scope grant, and the file its token is in.
func grantWorld(t *testing.T) (*world, string) {
	t.Helper()
	const token = "e2e-approver-token"
	sum := sha256.Sum256([]byte(token))
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, func(w *world) {
		w.Opts.AdminYAML = "clients:\n  - name: approver\n    token_sha256: " + hex.EncodeToString(sum[:]) + "\n    scopes: [grant]\n"
	})
	return w, tokenFile
}

// grantCLI runs `egressd grant ARGS` against w's admin listener.
func grantCLI(t *testing.T, w *world, tokenFile string, args ...string) (string, string, int) {
	t.Helper()
	return RunCLI(t, append(append([]string{"grant"}, args...), "--server", "http://"+w.E.AdminAddr, "--token-file", tokenFile)...)
}

type grantOut struct {
	ID          string    `json:"id"`
	Identity    string    `json:"identity"`
	Method      string    `json:"method"`
	Host        string    `json:"host"`
	Port        int       `json:"port"`
	Path        string    `json:"path"`
	Tunnel      bool      `json:"tunnel"`
	Expires     time.Time `json:"expires"`
	GrantedBy   string    `json:"granted_by"`
	FromRequest string    `json:"from_request"`
}

// A request a rule denies is let through by a grant made from its
// request id, for exactly its method, host, port and path, until the
// grant expires; then it is denied again. Every step is in the audit log,
// which verifies.
func TestGrantFromRequestExpires(t *testing.T) {
	w, tokenFile := grantWorld(t)
	c := w.E.Client("", "")
	get := func(u string) (int, string) {
		t.Helper()
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		readAll(resp)
		return resp.StatusCode, resp.Header.Get("X-Egressd-Request")
	}
	target := w.url("other.test", "/files/a*b?x=1")
	status, id := get(target)
	if status != http.StatusForbidden || id == "" {
		t.Fatalf("GET %s = %d (request %q); want 403 with a request id", target, status, id)
	}
	w.E.WaitRecords(t, "the refusal", ByRequest(id))

	// Long enough for the requests below on a loaded machine; its expiry
	// is awaited at the end, after the explicit grant's steps.
	stdout, stderr, code := grantCLI(t, w, tokenFile, "--from-request", id, "--ttl", "5s")
	if code != 0 {
		t.Fatalf("grant --from-request %s: exit %d: %s", id, code, stderr)
	}
	var g grantOut
	if err := json.Unmarshal([]byte(stdout), &g); err != nil {
		t.Fatalf("grant output %q: %v", stdout, err)
	}
	want := grantOut{ID: g.ID, Identity: "anonymous", Method: "GET", Host: "other.test", Port: w.HTTP.Port, Path: "/files/a*b",
		Expires: g.Expires, GrantedBy: "approver", FromRequest: id}
	if g != want || g.ID == "" {
		t.Errorf("grant = %+v; want %+v", g, want)
	}

	if status, _ := get(target); status != http.StatusOK {
		t.Errorf("GET %s under the grant = %d; want 200", target, status)
	}
	// Exactly that path and method: "*" in it is literal, and the host
	// is not opened.
	for _, other := range []string{w.url("other.test", "/files/aXb"), w.url("other.test", "/files/a"), w.url("other.test", "/")} {
		if status, _ := get(other); status != http.StatusForbidden {
			t.Errorf("GET %s under the grant = %d; want 403 (the grant is for /files/a*b only)", other, status)
		}
	}
	if resp, err := c.Post(target, "text/plain", strings.NewReader("x")); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST %s under a GET grant = %v, %v; want 403", target, resp, err)
	}
	// An explicit grant, for longer, shows in check and list and is
	// revoked: the 5s grant may expire while a slow check starts.
	explicit := w.url("other.test", "/files/b")
	stdout, stderr, code = grantCLI(t, w, tokenFile, "--identity", "anonymous", "--method", "GET", "--url", explicit, "--ttl", "1h")
	var g2 grantOut
	if code != 0 || json.Unmarshal([]byte(stdout), &g2) != nil || g2.Path != "/files/b" {
		t.Fatalf("grant --url %s: exit %d, %s%s; want a grant for /files/b", explicit, code, stdout, stderr)
	}
	out, _, code := RunCLI(t, "check", "http", "--config", w.E.ConfigPath, "GET", explicit)
	if code != 0 || !strings.Contains(out, `"rule":"grant:`+g2.ID+`"`) || !strings.Contains(out, `"expires":`) {
		t.Errorf("check under the grant: exit %d, %s; want allowed by rule grant:%s with its expiry", code, out, g2.ID)
	}
	list, _, code := grantCLI(t, w, tokenFile, "list")
	if code != 0 || !strings.Contains(list, g2.ID) {
		t.Errorf("grant list: exit %d, %s; want the grant", code, list)
	}
	if status, _ := get(explicit); status != http.StatusOK {
		t.Errorf("GET %s under the explicit grant = %d; want 200", explicit, status)
	}
	if _, stderr, code := grantCLI(t, w, tokenFile, "revoke", g2.ID); code != 0 {
		t.Errorf("grant revoke %s: exit %d, %s", g2.ID, code, stderr)
	}
	if status, _ := get(explicit); status != http.StatusForbidden {
		t.Errorf("GET %s after the revoke = %d; want 403", explicit, status)
	}

	w.E.WaitRecords(t, "the grant's expiry", func(r audit.Record) bool {
		return r.Kind == audit.KindGrant && r.Detail["event"] == "expired" && r.Detail["id"] == g.ID
	})
	if status, _ := get(target); status != http.StatusForbidden {
		t.Errorf("GET %s after the grant expired = %d; want 403", target, status)
	}
	created := w.E.WaitRecords(t, "the grant's creation", func(r audit.Record) bool {
		return r.Kind == audit.KindGrant && r.Detail["event"] == "created" && r.Detail["id"] == g.ID
	})[0]
	w.E.WaitRecords(t, "the revoke", func(r audit.Record) bool {
		return r.Kind == audit.KindGrant && r.Detail["event"] == "revoked" && r.Detail["id"] == g2.ID && r.Detail["by"] == "approver"
	})
	if created.Detail["by"] != "approver" || created.Detail["from_request"] != id || created.Rule != "grant:"+g.ID ||
		created.Path != "/files/a*b" || created.Detail["expires"] != g.Expires.UTC().Format(time.RFC3339) {
		t.Errorf("created record = %+v; want by approver, from_request %s, rule grant:%s, its path and expiry", created, id, g.ID)
	}
	m := w.E.Metrics(t)
	for _, s := range []string{"egressd_grants_created_total 2", "egressd_grants_expired_total 1", "egressd_grants_revoked_total 1", "egressd_grants_active 0"} {
		if !strings.Contains(m, s+"\n") {
			t.Errorf("metrics lack %q", s)
		}
	}
	VerifyAudit(t, w.E)
}

// A CONNECT refusal is granted only as a tunnel, when asked for; the
// tunnel opened under the grant is closed at its expiry, and its
// completion record says so.
func TestGrantTunnelClosedAtExpiry(t *testing.T) {
	w, tokenFile := grantWorld(t)
	authority := fmt.Sprintf("other.test:%d", w.HTTPS.Port)
	_, resp := connect(t, w.E.ProxyAddr, authority, "")
	id := resp.Header.Get("X-Egressd-Request")
	if resp.StatusCode != http.StatusForbidden || id == "" {
		t.Fatalf("CONNECT %s = %d (request %q); want 403 with a request id", authority, resp.StatusCode, id)
	}
	w.E.WaitRecords(t, "the refusal", ByRequest(id))
	if _, stderr, code := grantCLI(t, w, tokenFile, "--from-request", id, "--ttl", "1h"); code != 1 || !strings.Contains(stderr, `"tunnel": true`) {
		t.Errorf("grant of a CONNECT without --tunnel: exit %d, %s; want exit 1 saying to ask for a tunnel", code, stderr)
	}
	if _, stderr, code := grantCLI(t, w, tokenFile, "--from-request", id, "--tunnel", "--ttl", "3s"); code != 0 {
		t.Fatalf("grant --tunnel: exit %d: %s", code, stderr)
	}

	conn, resp := connect(t, w.E.ProxyAddr, authority, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s under the grant = %d; want 200", authority, resp.StatusCode)
	}
	tc := tls.Client(conn, &tls.Config{ServerName: "other.test", InsecureSkipVerify: true})
	tc.SetDeadline(time.Now().Add(15 * time.Second))
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
	buf := make([]byte, 4096)
	if n, err := tc.Read(buf); err != nil || !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 200") {
		t.Fatalf("request through the granted tunnel: %q, %v; want 200", buf[:n], err)
	}
	// Waits on the completion record, written when the expiry closed
	// the tunnel.
	done := w.E.WaitRecords(t, "the tunnel's completion", func(r audit.Record) bool {
		return r.Kind == audit.KindConnectDone && r.Host == "other.test"
	})[0]
	if done.Decision != audit.DecisionDeny || done.Reason != "no_matching_rule" {
		t.Errorf("completion = %+v; want closed deny no_matching_rule", done)
	}
	if n, err := tc.Read(buf); err == nil {
		t.Errorf("read on the tunnel after expiry = %d bytes; want it closed", n)
	}
	// The grant's expiry is in the chain before the tunnel's close.
	var expiredSeq uint64
	for _, r := range w.E.Records(t) {
		if r.Kind == audit.KindGrant && r.Detail["event"] == "expired" {
			expiredSeq = r.Seq
		}
	}
	if expiredSeq == 0 || expiredSeq > done.Seq {
		t.Errorf("grant expired record seq %d, tunnel completion seq %d; want the expiry first", expiredSeq, done.Seq)
	}
	VerifyAudit(t, w.E)
}

// The grant routes refuse a request without a token, with an unknown
// one, and a request whose refusal protects the box (the address floor).
func TestGrantRefusals(t *testing.T) {
	w, tokenFile := grantWorld(t)
	if code, body, err := w.E.Admin(http.MethodGet, "/v1/grants"); err != nil || code != http.StatusUnauthorized {
		t.Errorf("GET /v1/grants without a token = %d %q, %v; want 401", code, body, err)
	}
	bad := filepath.Join(t.TempDir(), "bad")
	if err := os.WriteFile(bad, []byte("nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := grantCLI(t, w, bad, "list"); code != 1 || !strings.Contains(stderr, "401") {
		t.Errorf("grant list with an unknown token: exit %d, %s; want exit 1, 401", code, stderr)
	}
	// meta.test resolves to the metadata address: the floor refuses it,
	// and no grant lifts that.
	resp, err := w.E.Client("", "").Get(w.url("meta.test", "/latest/meta-data/"))
	if err != nil {
		t.Fatal(err)
	}
	readAll(resp)
	id := resp.Header.Get("X-Egressd-Request")
	w.E.WaitRecords(t, "the floor's refusal", ByRequest(id))
	if _, stderr, code := grantCLI(t, w, tokenFile, "--from-request", id, "--ttl", "1h"); code != 1 || !strings.Contains(stderr, "no grant lifts it") {
		t.Errorf("grant of a floor refusal: exit %d, %s; want exit 1 saying no grant lifts it", code, stderr)
	}
	if _, stderr, code := grantCLI(t, w, tokenFile, "--from-request", "nosuchrequest", "--ttl", "1h"); code != 1 || !strings.Contains(stderr, "404") {
		t.Errorf("grant of an unknown request: exit %d, %s; want exit 1, 404", code, stderr)
	}
	if _, stderr, code := grantCLI(t, w, tokenFile, "--identity", "sandbox-1", "--method", "GET", "--url", "http://other.test/", "--ttl", "1h"); code != 1 || !strings.Contains(stderr, "not one egressd knows") {
		t.Errorf("grant for an identity not configured: exit %d, %s; want exit 1 naming it", code, stderr)
	}
	if _, stderr, code := grantCLI(t, w, tokenFile, "--identity", "anonymous", "--method", "GET", "--url", "http://other.test/", "--ttl", "200h"); code != 1 || !strings.Contains(stderr, "longer than a grant may last") {
		t.Errorf("grant for 200h: exit %d, %s; want exit 1 naming the limit", code, stderr)
	}
}
