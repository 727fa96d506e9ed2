package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/errors/*.golden and testdata/explain/*.golden from the current output")

// goldenConfig is prepended to every config of the error tests: a long
// eval timeout, since under -race on a loaded machine the 100ms default
// could turn a decision into policy_timeout.
const goldenConfig = "policy:\n  eval_timeout: 10s\n"

// sqlConfig has an identity with a SQL profile, for check sql.
const sqlConfig = goldenConfig + `identities:
  - id: sandbox-1
    token_sha256: 0000000000000000000000000000000000000000000000000000000000000000
    attributes: {sql_profile: read_only}
`

// TestErrorMessages runs command lines that a new operator gets wrong and
// compares what egressd says (exit status, stderr, stdout) with
// testdata/errors/NAME.golden; -update rewrites them. Each message must
// say where the problem is and what to write instead.
func TestErrorMessages(t *testing.T) {
	bundle := func(data string) map[string]string {
		return map[string]string{"mypolicy/data.json": data}
	}
	tests := []struct {
		name  string
		files map[string]string // relative to the test's directory; a bundle dir gets `policy init` first
		args  []string
		stdin string
	}{
		{"yaml_tab", map[string]string{"egressd.yaml": goldenConfig + "proxy:\n\tlisten: 127.0.0.1:3128\n"},
			[]string{"check", "connect", "--config", "egressd.yaml", "pypi.org:443"}, ""},
		{"yaml_line_of_bad_indent", map[string]string{"egressd.yaml": goldenConfig + "identities:\n  - id: sandbox-1\n   sources: [10.0.0.7/32]\n"},
			[]string{"check", "connect", "--config", "egressd.yaml", "pypi.org:443"}, ""},
		{"yaml_line_of_unclosed_list", map[string]string{"egressd.yaml": goldenConfig + "\ndns:\n  upstreams: [192.0.2.53:53\n"},
			[]string{"check", "connect", "--config", "egressd.yaml", "pypi.org:443"}, ""},
		{"duration_without_unit", map[string]string{"egressd.yaml": goldenConfig + "proxy:\n  idle_timeout: 60\n"},
			[]string{"check", "connect", "--config", "egressd.yaml", "pypi.org:443"}, ""},
		{"check_via_unknown", nil, []string{"check", "connect", "--via", "vpn", "pypi.org:443"}, ""},
		{"unknown_key", map[string]string{"egressd.yaml": goldenConfig + "proxy:\n  listen_addr: 127.0.0.1:3128\n"},
			[]string{"check", "connect", "--config", "egressd.yaml", "pypi.org:443"}, ""},
		{"rule_unknown_key", bundle(`{"rules": [{"id": "pypi", "hosts": ["pypi.org"], "ports": [443]}, {"id": "docs", "hosts": ["docs.example.com"], "port": [80]}]}`),
			[]string{"policy", "check", "mypolicy"}, ""},
		{"rule_wrong_type", bundle(`{"rules": [{"id": "docs", "hosts": ["docs.example.com"], "ports": ["80"]}]}`),
			[]string{"policy", "check", "mypolicy"}, ""},
		{"rule_lower_case_method", bundle(`{"rules": [{"id": "pypi", "hosts": ["pypi.org"], "ports": [443]}, {"id": "docs", "hosts": ["docs.example.com"], "ports": [80], "methods": ["get"]}]}`),
			[]string{"policy", "check", "mypolicy"}, ""},
		{"rule_bad_host", bundle(`{"rules": [{"id": "docs", "hosts": ["Docs.Example.com"], "ports": [80]}]}`),
			[]string{"policy", "check", "mypolicy"}, ""},
		{"rule_host_url", bundle(`{"rules": [{"id": "pypi", "hosts": ["https://pypi.org/simple/"], "ports": [443]}]}`),
			[]string{"policy", "check", "mypolicy"}, ""},
		{"rule_host_port", bundle(`{"rules": [{"id": "pypi", "hosts": ["pypi.org:443"], "ports": [443]}]}`),
			[]string{"policy", "check", "mypolicy"}, ""},
		{"rule_bad_mode", bundle(`{"rules": [{"id": "docs", "hosts": ["docs.example.com"], "ports": [80], "mode": "dry-run"}]}`),
			[]string{"policy", "check", "mypolicy"}, ""},
		{"bundle_bad_mode", bundle(`{"mode": "observed", "rules": []}`),
			[]string{"policy", "check", "mypolicy"}, ""},
		{"identity_bad_mode", map[string]string{"egressd.yaml": goldenConfig + "identities:\n  - id: sandbox-1\n    sources: [10.0.0.7/32]\n    mode: audit\n"},
			[]string{"check", "connect", "--config", "egressd.yaml", "--identity", "sandbox-1", "pypi.org:443"}, ""},
		{"policy_check_config_secret_missing", map[string]string{"egressd.yaml": goldenConfig + "secrets:\n  - name: k\n    file: missing.key\n"},
			[]string{"policy", "check", "--config", "egressd.yaml"}, ""},
		{"policy_check_config_secret_short", map[string]string{"egressd.yaml": goldenConfig + "secrets:\n  - name: k\n    file: k.key\n", "k.key": "short\n"},
			[]string{"policy", "check", "--config", "egressd.yaml"}, ""},
		// check never reads a secret's value (README: "Would serve accept
		// this?"); serve --check and policy check --config do.
		{"check_config_secret_missing", map[string]string{"egressd.yaml": goldenConfig + "secrets:\n  - name: k\n    file: missing.key\n"},
			[]string{"check", "connect", "--config", "egressd.yaml", "pypi.org:443"}, ""},
		{"bundle_url_and_dir", map[string]string{"egressd.yaml": goldenConfig + "  dir: mypolicy\n  bundle_url: https://bundles.example.com/egress.tar.gz\n  bundle_verification: {public_key_file: public.pem}\n"},
			[]string{"check", "connect", "--config", "egressd.yaml", "pypi.org:443"}, ""},
		{"bundle_url_without_key", map[string]string{"egressd.yaml": goldenConfig + "  bundle_url: https://bundles.example.com/egress.tar.gz\n"},
			[]string{"check", "connect", "--config", "egressd.yaml", "pypi.org:443"}, ""},
		{"bundle_url_http", map[string]string{"egressd.yaml": goldenConfig + "  bundle_url: http://bundles.example.com/egress.tar.gz\n  bundle_verification: {public_key_file: public.pem}\n"},
			[]string{"check", "connect", "--config", "egressd.yaml", "pypi.org:443"}, ""},
		// check does not poll the bundle service: it says how to give it
		// the bundle.
		{"check_bundle_url", map[string]string{"egressd.yaml": goldenConfig + "  bundle_url: https://bundles.example.com/egress.tar.gz\n  bundle_verification: {public_key_file: public.pem}\n"},
			[]string{"check", "connect", "--config", "egressd.yaml", "pypi.org:443"}, ""},
		{"internal_metadata_allow", map[string]string{"egressd.yaml": goldenConfig + "internal:\n  - {cidr: 169.254.169.254, ports: [80], action: allow}\n"},
			[]string{"check", "connect", "--config", "egressd.yaml", "pypi.org:443"}, ""},
		{"policy_test_shows_decision", map[string]string{"mypolicy/mine_test.rego": "package mine_test\n\nimport data.egress.fixtures\nimport data.egress.http\n\n" +
			"test_pypi_upload_reason if {\n\td := http.decision with input as fixtures.loaded_http(\"POST\", \"pypi.org\", 443, \"/legacy/\")\n\td.reason == \"no_matching_rule\"\n}\n"},
			[]string{"policy", "test", "mypolicy"}, ""},
		{"check_http_url_first", nil, []string{"check", "http", "http://docs.example.com/", "GET"}, ""},
		{"check_http_one_argument", nil, []string{"check", "http", "http://docs.example.com/"}, ""},
		{"grant_without_ttl", nil, []string{"grant", "--from-request", "0123abcd"}, ""},
		{"grant_nothing_to_grant", nil, []string{"grant", "--ttl", "1h"}, ""},
		{"grant_without_token", nil, []string{"grant", "--from-request", "0123abcd", "--ttl", "1h"}, ""},
		{"grant_revoke_without_id", nil, []string{"grant", "revoke"}, ""},
		{"replay_without_policy", nil, []string{"policy", "replay", "--audit", "audit"}, ""},
		{"replay_audit_missing", bundle(`{"rules": [{"id": "pypi", "hosts": ["pypi.org"], "ports": [443]}]}`),
			[]string{"policy", "replay", "--policy", "mypolicy", "--audit", "nowhere"}, ""},
		{"audit_show_unknown_kind", nil, []string{"audit", "show", "--kind", "htpp", "audit"}, ""},
		{"audit_show_since_unparseable", nil, []string{"audit", "show", "--since", "yesterday", "audit"}, ""},
		{"sql_parse_error", map[string]string{"egressd.yaml": sqlConfig},
			[]string{"check", "sql", "--identity", "sandbox-1", "--config", "egressd.yaml", "SELECT 1;\nSELEC name FROM users"}, ""},
		{"sql_parse_error_stdin", map[string]string{"egressd.yaml": sqlConfig},
			[]string{"check", "sql", "--identity", "sandbox-1", "--config", "egressd.yaml", "-"}, "-- the users\nSELECT name FROM users WHERE (id = 1\n"},
	}
	digest := regexp.MustCompile(`sha256:[0-9a-f]{64}`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			for name, body := range tt.files {
				if strings.HasPrefix(name, "mypolicy/") {
					if code, _, errb := runCLI("policy", "init", "mypolicy"); code != 0 {
						t.Fatalf("policy init: exit %d: %s", code, errb)
					}
				}
				if err := os.WriteFile(name, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var stdout, stderr bytes.Buffer
			code := exitCode(runCheckOrRun(tt.args, tt.stdin, &stdout, &stderr), &stderr)
			shown := make([]string, len(tt.args))
			for i, a := range tt.args {
				shown[i] = a
				if strings.ContainsAny(a, " \n'\"") {
					shown[i] = strconv.Quote(a)
				}
			}
			got := fmt.Sprintf("$ egressd %s\n", strings.Join(shown, " "))
			if tt.stdin != "" {
				got += "-- stdin --\n" + tt.stdin
			}
			got += fmt.Sprintf("exit %d\n-- stderr --\n%s-- stdout --\n%s", code, stderr.String(), stdout.String())
			got = digest.ReplaceAllString(strings.ReplaceAll(got, dir, "$DIR"), "sha256:…")
			matchGolden(t, goldenDir, tt.name, got, tt.args)
		})
	}
}

// matchGolden compares got, the transcript of egressd args, with dir's
// NAME.golden, or writes it there with -update.
func matchGolden(t *testing.T, dir, name, got string, args []string) {
	t.Helper()
	path := filepath.Join(dir, name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("egressd %v said:\n%s\nwant (%s):\n%s", args, got, path, want)
	}
}

// goldenDir and explainGoldenDir are testdata/errors and
// testdata/explain as absolute paths: the tests chdir.
var goldenDir, explainGoldenDir = testdataDir("errors"), testdataDir("explain")

func testdataDir(sub string) string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Join(wd, "testdata", sub)
}

// runCheckOrRun is run, with stdin for the commands that read it.
func runCheckOrRun(args []string, stdin string, stdout, stderr *bytes.Buffer) error {
	if len(args) > 0 && args[0] == "check" {
		return runCheckFrom(strings.NewReader(stdin), args[1:], stdout, stderr)
	}
	return run(args, stdout, stderr)
}

// TestHelpExitsZero: -h and --help print the command's own help, in the
// one shape every command shares, to stdout (asked for, it is output: it
// can be paged or searched), and exit 0, for every command and action.
func TestHelpExitsZero(t *testing.T) {
	cmds := [][]string{{}}
	for name := range commands {
		cmds = append(cmds, []string{name})
	}
	for kind := range checkKinds {
		cmds = append(cmds, []string{"check", kind})
	}
	for action := range policyActions {
		cmds = append(cmds, []string{"policy", action})
	}
	for action := range auditActions {
		cmds = append(cmds, []string{"audit", action})
	}
	for action := range grantActions {
		cmds = append(cmds, []string{"grant", action})
	}
	cmds = append(cmds, []string{"identity", "hash"})
	for _, cmd := range cmds {
		for _, h := range []string{"-h", "--help"} {
			args := append(append([]string{}, cmd...), h)
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				code, stdout, stderr := runCLI(args...)
				want := "usage: egressd " + strings.Join(cmd, " ")
				if code != 0 || !strings.HasPrefix(stdout, want) || !strings.Contains(stdout, "\nexit status: ") || stderr != "" {
					t.Errorf("egressd %v: exit %d, stdout %q, stderr %q; want exit 0 and help on stdout beginning %q with an exit status line", args, code, stdout, stderr, want)
				}
				if strings.Contains(stdout, "\nflags:\n") && strings.Contains(stdout, "\n  -") && regexp.MustCompile(`\n  -[a-z][a-z]`).MatchString(stdout) {
					t.Errorf("egressd %v: a long flag shown with one dash:\n%s", args, stdout)
				}
			})
		}
	}
}

// TestUsageStreams (issue 25 item 7): help asked for is output (stdout,
// exit 0); help shown because the command line is wrong goes with the
// error to stderr (exit 2).
func TestUsageStreams(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		code       int
		wantStdout bool
	}{
		{"help", []string{"help"}, 0, true},
		{"-h", []string{"-h"}, 0, true},
		{"no subcommand", nil, 2, false},
		{"unknown subcommand", []string{"nope"}, 2, false},
		{"unknown flag", []string{"version", "--nope"}, 2, false},
		{"group without action", []string{"policy"}, 2, false},
		{"check without kind", []string{"check"}, 2, false},
		{"check flags first, -h", []string{"check", "--config", "x.yaml", "-h"}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(tt.args...)
			help, other := stdout, stderr
			if !tt.wantStdout {
				help, other = stderr, stdout
			}
			if code != tt.code || !strings.Contains(help, "usage: egressd ") || strings.Contains(other, "usage: egressd ") {
				t.Errorf("egressd %v: exit %d, stdout %q, stderr %q; want exit %d and the usage on stdout %v",
					tt.args, code, stdout, stderr, tt.code, tt.wantStdout)
			}
		})
	}
}

// TestCheckSQLFromStdin: `check sql -` decides the text on standard
// input, so SQL that begins with a comment ("-- …"), which the flag parser
// would take for a flag, can be checked.
func TestCheckSQLFromStdin(t *testing.T) {
	cfg := writeConfig(t, t.TempDir(), sqlConfig)
	tests := []struct {
		name, stdin string
		code        int
		want        string
	}{
		{"comment first", "-- who is there\nSELECT name FROM users", 0, `"reason":"allowed"`},
		{"two statements", "SELECT 1;\nDELETE FROM users", 1, `"reason":"write_denied"`},
		{"empty", " \n", 2, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := []string{"sql", "--config", cfg, "--identity", "sandbox-1", "-"}
			code := exitCode(runCheckFrom(strings.NewReader(tt.stdin), args, &stdout, &stderr), &stderr)
			if code != tt.code || !strings.Contains(stdout.String(), tt.want) {
				t.Errorf("check sql - < %q: exit %d, %s%s; want exit %d and %s", tt.stdin, code, stdout.String(), stderr.String(), tt.code, tt.want)
			}
		})
	}
}
