package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap"

	"github.com/egressd/egressd/dnsguard"
	"github.com/egressd/egressd/dnsguard/dnstest"
	"github.com/egressd/egressd/internal/egressdbin"
	"github.com/egressd/egressd/policy"
)

// batchIdentities are the identities of the batch tests' config; the
// witness decides for the same ones.
var batchIdentities = []policy.Identity{
	{ID: "team", Attributes: map[string]string{"tier": "1"}},
	{ID: "ci", Attributes: map[string]string{}},
}

const batchYAML = "policy:\n  eval_timeout: 10s\nidentities:\n" +
	"  - id: team\n    sources: [192.0.2.1/32]\n    attributes: {tier: \"1\"}\n" +
	"  - id: ci\n    sources: [192.0.2.2/32]\n"

// batchLine is one request line of `check --batch`.
type batchLine struct {
	Kind     string `json:"kind"`
	Identity string `json:"identity"`
	Method   string `json:"method,omitempty"`
	URL      string `json:"url,omitempty"`
	Target   string `json:"target,omitempty"`
	Name     string `json:"name,omitempty"`
	QType    string `json:"qtype,omitempty"`
}

// args is the single check of l.
func (l batchLine) args(cfg string) []string {
	kind := l.Kind
	var extra []string
	if kind == "redirect" {
		kind, extra = "http", []string{"--redirect"}
	}
	args := append([]string{"check", kind, "--config", cfg, "--identity", l.Identity}, extra...)
	switch l.Kind {
	case "http", "redirect":
		return append(args, "--", l.Method, l.URL)
	case "connect":
		return append(args, "--", l.Target)
	default:
		return append(args, "--qtype", l.QType, "--", l.Name)
	}
}

// batchLines generates n distinct requests, deterministically: http to
// allowed and refused hosts, methods and paths (dot segments, encoded
// separators, metadata and obfuscated addresses among them), redirects,
// CONNECTs, DNS questions.
func batchLines(n int) []batchLine {
	r := rand.New(rand.NewPCG(24, 4))
	hosts := []string{"deb.debian.org", "security.debian.org", "pypi.org", "files.pythonhosted.org", "registry.npmjs.org",
		"api.github.com", "example.com", "evil.test", "169.254.169.254", "10.0.0.1", "2130706433", "[fd00:ec2::254]", "xn--e1afmkfd.test"}
	methods := []string{"GET", "GET", "HEAD", "POST", "DELETE"}
	paths := []string{"/debian/pool/%d/x", "/repos/o/r%d", "/users/u%d", "/a/%%2e%%2e/%d", "/a%%2Fb/%d", "/simple/p%d/", "//x/%d", "/search/code?q=%d"}
	pick := func(s []string) string { return s[r.IntN(len(s))] }
	lines := make([]batchLine, n)
	for i := range lines {
		l := batchLine{Identity: batchIdentities[r.IntN(len(batchIdentities))].ID}
		switch k := r.IntN(10); {
		case k < 6:
			l.Kind = "http"
			if k == 5 {
				l.Kind = "redirect"
			}
			scheme := "http"
			if r.IntN(3) == 0 {
				scheme = "https"
			}
			l.Method = pick(methods)
			l.URL = scheme + "://" + pick(hosts) + fmt.Sprintf(pick(paths), i)
		case k < 8:
			l.Kind = "connect"
			l.Target = pick(hosts) + ":" + pick([]string{"443", "80", "22"})
		default:
			l.Kind = "dns"
			l.Name = pick(append(hosts[:7:7], fmt.Sprintf("n%d.example.com", i)))
			l.QType = pick([]string{"A", "AAAA", "TXT", "ANY", "MX"})
		}
		lines[i] = l
	}
	return lines
}

// batchOutput is what the comparisons read of a decision line.
type batchOutput struct {
	Kind     string        `json:"kind"`
	Identity string        `json:"identity"`
	Allow    bool          `json:"allow"`
	Reason   policy.Reason `json:"reason"`
	Rule     string        `json:"rule"`
	Error    string        `json:"error"`
}

// witness decides l with the policy package as the listeners call it, in
// this process: the decision `check` must print.
func witness(ctx context.Context, eng *policy.Engine, floor *dnsguard.Floor, l batchLine) batchOutput {
	var id policy.Identity
	for _, bi := range batchIdentities {
		if bi.ID == l.Identity {
			id = bi
		}
	}
	out := batchOutput{Kind: l.Kind, Identity: id.ID}
	pd := policy.PreDial{Engine: eng, Floor: floor}
	var o policy.Outcome
	switch l.Kind {
	case "http", "redirect":
		kind := policy.KindHTTP
		if l.Kind == "redirect" {
			kind = policy.KindRedirect
		}
		o = pd.DecideRequest(ctx, id, kind, policy.HTTPRequest{Method: l.Method, Target: l.URL})
	case "connect":
		o = pd.DecideConnect(ctx, id, l.Target)
	default:
		_, d, err := dnsguard.Decide(ctx, eng, id, l.Name, dns.StringToType[l.QType])
		o = policy.Outcome{Decision: d, Err: err}
	}
	out.Allow, out.Reason, out.Rule = o.Decision.Allow, o.Decision.Reason, o.Decision.Rule
	if o.Err != nil {
		// Refused before the policy: no rule, and the refusal's reason.
		out.Allow, out.Rule = false, ""
		var de *policy.DenyError
		if errors.As(o.Err, &de) {
			out.Reason = de.Reason
		}
	}
	return out
}

// TestCheckBatchMatchesSingle: `check --batch` of 10,000 generated lines
// gives, line for line, the decision the policy package gives in this
// process for each; and for 200 lines spread over the set, exactly the
// bytes the binary's single check prints.
func TestCheckBatchMatchesSingle(t *testing.T) {
	const n, sampled = 10000, 200
	cfg := filepath.Join(t.TempDir(), "egressd.yaml")
	if err := os.WriteFile(cfg, []byte(batchYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	lines := batchLines(n)
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for _, l := range lines {
		if err := enc.Encode(l); err != nil {
			t.Fatal(err)
		}
	}
	stdout, stderr, code := runCLIStdin(t, in.Bytes(), "check", "--batch", "--config", cfg)
	if code != 1 {
		t.Fatalf("check --batch: exit %d, stderr %s; want 1 (some denied)", code, stderr)
	}
	got := strings.SplitAfter(stdout, "\n")
	if len(got) != n+1 {
		t.Fatalf("check --batch printed %d lines for %d requests", len(got)-1, n)
	}

	ctx := context.Background()
	eng, err := policy.New(ctx, policy.Config{EvalTimeout: 10 * time.Second}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	floor, err := dnsguard.NewFloor(dnsguard.InternalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	allowed, failures := 0, 0
	for i, l := range lines {
		var out batchOutput
		if err := json.Unmarshal([]byte(got[i]), &out); err != nil || out.Error != "" {
			t.Fatalf("line %d %s: %v", i+1, got[i], err)
		}
		if out.Allow {
			allowed++
		}
		if want := witness(ctx, eng, floor, l); out != want && failures < 10 {
			failures++
			t.Errorf("line %d %+v: batch decided %+v; the policy package %+v", i+1, l, out, want)
		}
	}
	if allowed < n/20 || allowed > n-n/20 {
		t.Errorf("%d of %d lines allowed; want a mix", allowed, n)
	}
	for i := 0; i < n; i += n / sampled {
		single, stderr, code := RunCLI(t, lines[i].args(cfg)...)
		if code == 2 || single != got[i] {
			t.Errorf("line %d: batch printed\n%s; egressd %q (exit %d, %s) printed\n%s", i+1, got[i], lines[i].args(cfg), code, stderr, single)
		}
	}
}

// TestCheckServer: `check --server` asks the running egressd's admin
// listener with a token whose hash is in admin.clients, and prints what a
// local check of the same config prints; without the token the listener
// answers 401 and decides nothing.
func TestCheckServer(t *testing.T) {
	const token = "e2e-check-token"
	sum := sha256.Sum256([]byte(token))
	e := Start(t, Options{
		YAML:      batchYAML,
		DNS:       dnstest.Start(t).Addr(),
		AdminYAML: fmt.Sprintf("clients: [{name: tooling, token_sha256: %s, scopes: [check]}]", hex.EncodeToString(sum[:])),
	})
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	server := "http://" + e.AdminAddr
	lines := batchLines(300)
	for _, l := range lines[:30] {
		local := l.args(e.ConfigPath)
		remote := append([]string{local[0], "--server", server, "--token-file", tokFile}, local[1:]...)
		remote = slicesDeleteConfig(remote)
		lout, lerr, lcode := RunCLI(t, local...)
		rout, rerr, rcode := RunCLI(t, remote...)
		if rout != lout || rcode != lcode {
			t.Errorf("egressd %q: exit %d %s%s; locally exit %d %s%s", remote, rcode, rout, rerr, lcode, lout, lerr)
		}
	}
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for _, l := range lines {
		enc.Encode(l) //nolint:errcheck // a bytes.Buffer
	}
	lout, _, lcode := runCLIStdin(t, in.Bytes(), "check", "--batch", "--config", e.ConfigPath)
	rout, rerr, rcode := runCLIStdin(t, in.Bytes(), "check", "--batch", "--server", server, "--token-file", tokFile)
	if rout != lout || rcode != lcode {
		t.Errorf("check --batch --server: exit %d (%s), %d bytes; locally exit %d, %d bytes", rcode, rerr, len(rout), lcode, len(lout))
	}

	resp, err := http.Post(server+"/v1/check", "application/x-ndjson", strings.NewReader(`{"kind":"connect","identity":"team","target":"pypi.org:443"}`+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /v1/check without a token = %d; want 401", resp.StatusCode)
	}
	_, stderr, code := RunCLI(t, "check", "--server", server, "--identity", "team", "connect", "pypi.org:443")
	if code != 2 || !strings.Contains(stderr, "admin.clients") {
		t.Errorf("check --server without a token: exit %d, %q; want 2 and a message naming admin.clients", code, stderr)
	}
}

// slicesDeleteConfig drops --config and its value: --server decides with
// the server's.
func slicesDeleteConfig(args []string) []string {
	out := args[:0:0]
	for i := 0; i < len(args); i++ {
		if args[i] == "--config" {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// runCLIStdin is RunCLI with standard input.
func runCLIStdin(t *testing.T, stdin []byte, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = cleanEnv()
	cmd.Stdin = bytes.NewReader(stdin)
	return egressdbin.Output(t, cmd)
}
