package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// explainRules are prepended to the embedded bundle's rules for the
// explain goldens, as README's "Write a rule" has a user do.
const explainRules = `
    {"id": "docs", "hosts": ["docs.example.com"], "ports": [80], "methods": ["GET"], "paths": ["/guide/**"]},
    {"id": "docs-admin", "hosts": ["docs.example.com"], "ports": [80], "paths": ["/admin/**"], "action": "deny"},
    {"id": "docs-drafts", "hosts": ["docs.example.com"], "ports": [80], "paths": ["/drafts/**"], "action": "deny", "mode": "observe"},
    {"id": "models", "hosts": ["*.models.example.com"], "ports": [443]},
    {"id": "ci", "hosts": ["ci.example.com"], "ports": [8443], "identities": ["builder"]},
    {"id": "tickets-mcp", "hosts": ["mcp.example.com"], "ports": [443], "inspect": true,
     "mcp": {"tools": ["search_*", "ticket.create"]}},
    {"id": "claude", "hosts": ["api.anthropic.com"], "ports": [443], "inspect": true,
     "llm": {"api": "anthropic", "models": ["claude-haiku-*"], "max_output_tokens": 4096}},`

// TestCheckExplain runs `egressd check … --explain` as users run it and
// compares what it prints (exit status, stderr, stdout) with
// testdata/explain/NAME.golden; -update rewrites them. The denials are
// the representative ones: a near miss on method, a path glob miss, a
// port miss, an identity miss, an encoded separator refused before any
// rule, a tool and a model a body rule refuses, an explicit deny rule
// (and one in observe mode, which lets the request through), a
// refusal before the policy, a dns name a wildcard leaves out, and a sql
// write; and one allow.
func TestCheckExplain(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if code, _, errb := runCLI("policy", "init", "mypolicy"); code != 0 {
		t.Fatalf("policy init: exit %d: %s", code, errb)
	}
	data, err := os.ReadFile("mypolicy/data.json")
	if err != nil {
		t.Fatal(err)
	}
	withRules := strings.Replace(string(data), `"rules": [`, `"rules": [`+explainRules, 1)
	if withRules == string(data) {
		t.Fatal(`mypolicy/data.json has no "rules": [ to prepend to`)
	}
	if err := os.WriteFile("mypolicy/data.json", []byte(withRules), 0o644); err != nil {
		t.Fatal(err)
	}
	writeConfig(t, dir, "policy:\n  dir: mypolicy\n  eval_timeout: 10s\n")
	if err := os.WriteFile("sql.yaml", []byte("policy:\n  dir: mypolicy\n  eval_timeout: 10s\n"+
		"identities:\n  - id: sandbox-1\n    sources: [127.0.0.1/32]\n    attributes: {sql_profile: read_only}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	check := func(args ...string) []string {
		return append([]string{"check", args[0], "--config", "egressd.yaml", "--explain"}, args[1:]...)
	}
	tests := []struct {
		name string
		args []string
	}{
		{"allow", check("http", "GET", "http://docs.example.com/guide/intro.html")},
		{"method_near_miss", check("http", "POST", "http://docs.example.com/guide/intro.html")},
		{"path_glob_miss", check("http", "GET", "http://docs.example.com/blog/post")},
		{"port_miss", check("http", "GET", "http://docs.example.com:8080/guide/intro.html")},
		{"identity_miss", check("connect", "ci.example.com:8443")},
		{"encoded_separator", check("http", "GET", "http://docs.example.com/guide/..%2Fsecret")},
		{"mcp_tool_denied", check("http", "--data", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"delete_repo","arguments":{"repo":"prod"}}}`,
			"POST", "https://mcp.example.com/mcp")},
		{"model_denied", check("http", "--data", `{"model":"claude-opus-4","max_tokens":1024,"messages":[]}`,
			"POST", "https://api.anthropic.com/v1/messages")},
		{"deny_rule_any_case", check("http", "GET", "http://docs.example.com/ADMIN/keys")},
		{"observed_deny_rule", check("http", "GET", "http://docs.example.com/drafts/next")},
		{"metadata_before_policy", check("http", "GET", "http://169.254.169.254/latest/meta-data/")},
		{"dns_wildcard_apex", check("dns", "models.example.com")},
		{"sql_write_denied", []string{"check", "sql", "--config", "sql.yaml", "--identity", "sandbox-1", "--explain", "DELETE FROM users"}},
	}
	digest := regexp.MustCompile(`sha256:[0-9a-f]{64}`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := exitCode(runCheckFrom(strings.NewReader(""), tt.args[1:], &stdout, &stderr), &stderr)
			shown := make([]string, len(tt.args))
			for i, a := range tt.args {
				shown[i] = a
				if strings.ContainsAny(a, " \n'\"{") {
					shown[i] = "'" + a + "'"
				}
			}
			got := fmt.Sprintf("$ egressd %s\nexit %d\n-- stderr --\n%s-- stdout --\n%s", strings.Join(shown, " "), code, stderr.String(), stdout.String())
			got = digest.ReplaceAllString(strings.ReplaceAll(got, dir, "$DIR"), "sha256:…")
			matchGolden(t, explainGoldenDir, tt.name, got, tt.args)
		})
	}
}

// TestCheckExplainKeepsDecision: --explain changes what is printed, never
// what is decided: its result line and exit status are the JSON check's,
// with --input too, whose inputs follow the explanations.
func TestCheckExplainKeepsDecision(t *testing.T) {
	cfg := writeConfig(t, t.TempDir(), goldenConfig)
	for _, args := range [][]string{
		{"http", "GET", "http://deb.debian.org/debian/"},
		{"http", "GET", "https://api.github.com/repos/o/r"},
		{"http", "POST", "https://api.github.com/repos/o/r/issues"},
		{"connect", "pypi.org:443"},
		{"http", "GET", "http://2130706433/"},
		{"dns", "--qtype", "TXT", "pypi.org"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			base := append([]string{args[0], "--config", cfg}, args[1:]...)
			var js, je bytes.Buffer
			jcode := exitCode(runCheckFrom(strings.NewReader(""), base, &js, &je), &je)
			var out checkOutput
			if err := json.Unmarshal(js.Bytes(), &out); err != nil {
				t.Fatalf("check %v: %v: %s", base, err, js.String())
			}
			ex := append([]string{args[0], "--explain", "--input"}, base[1:]...)
			var xs, xe bytes.Buffer
			xcode := exitCode(runCheckFrom(strings.NewReader(""), ex, &xs, &xe), &xe)
			want := "\nresult: " + resultText(out) + "\n"
			if xcode != jcode || !strings.HasSuffix(xs.String(), want) || xe.Len() != 0 {
				t.Errorf("check %v: exit %d, ends %q, stderr %q; want exit %d (the JSON check's) and the result line %q",
					ex, xcode, lastLine(xs.String()), xe.String(), jcode, want)
			}
			if !strings.Contains(xs.String(), "rego input, as evaluated:") {
				t.Errorf("check %v printed no rego input:\n%s", ex, xs.String())
			}
			ej := append([]string{args[0], "--explain=json"}, base[1:]...)
			var ejs, eje bytes.Buffer
			ejcode := exitCode(runCheckFrom(strings.NewReader(""), ej, &ejs, &eje), &eje)
			var withExplain checkOutput
			if err := json.Unmarshal(ejs.Bytes(), &withExplain); err != nil {
				t.Fatalf("check %v: %v: %s", ej, err, ejs.String())
			}
			n := len(withExplain.Explain)
			if ejcode != jcode || n == 0 || withExplain.Allow != out.Allow || withExplain.Reason != out.Reason ||
				withExplain.Explain[n-1].Decision.Reason != out.Reason && !strings.HasPrefix(args[0], "dns") {
				t.Errorf("check %v: exit %d, %+v; want exit %d, the decision %s %s explained last", ej, ejcode, withExplain, jcode, out.Reason, out.Rule)
			}
		})
	}
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	return strconv.Quote(s[strings.LastIndexByte(s, '\n')+1:])
}
