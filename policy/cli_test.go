package policy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egressd/egressd/internal/egressdbin"
)

// TestPolicyCommands runs `egressd policy check|test` on good and broken
// bundles: a syntax error exits 2 naming file:line, a failing Rego test
// exits 1 naming its file:line, a test calling http.send exits 2 naming
// its file:line.
func TestPolicyCommands(t *testing.T) {
	bin := egressdbin.Build(t)
	good := writeDir(t, map[string]string{"http.rego": miniModule, "http_test.rego": `package egress.http_test

import data.egress.http

test_ok if http.decision.allow with input as {"host": "ok.test"}
`})
	syntax := writeDir(t, map[string]string{"http.rego": "package egress.http\n\ndecision := {\"allow\": true,, }\n"})
	failing := writeDir(t, map[string]string{"http.rego": miniModule, "http_test.rego": `package egress.http_test

import data.egress.http

test_wrong if http.decision.allow with input as {"host": "no.test"}
`})
	// The address is never dialled: the bundle is refused at compile time.
	sends := writeDir(t, map[string]string{"http.rego": miniModule, "http_test.rego": `package egress.http_test

test_send if http.send({"method": "GET", "url": "http://127.0.0.1:9/"}).status_code == 200
`})
	tests := []struct {
		name     string
		args     []string
		code     int
		contains string
	}{
		{"check embedded", []string{"policy", "check"}, 0, "ok embedded bundle sha256:"},
		{"test embedded", []string{"policy", "test"}, 0, "PASS embedded bundle"},
		{"check good", []string{"policy", "check", good}, 0, "ok " + good},
		{"test good", []string{"policy", "test", good}, 0, "1 tests"},
		{"check syntax error", []string{"policy", "check", syntax}, 2, "http.rego:3: rego_parse_error"},
		{"test syntax error", []string{"policy", "test", syntax}, 2, "http.rego:3"},
		{"test failing", []string{"policy", "test", failing}, 1, "http_test.rego:5: data.egress.http_test.test_wrong"},
		{"check failing test compiles", []string{"policy", "check", failing}, 0, "ok "},
		{"check test calling http.send", []string{"policy", "check", sends}, 2, "http_test.rego:3: rego_type_error: undefined function http.send"},
		{"test calling http.send", []string{"policy", "test", sends}, 2, "http_test.rego:3: rego_type_error: undefined function http.send"},
		{"no such dir", []string{"policy", "check", "/nonexistent"}, 2, "not a directory"},
		{"unknown sub", []string{"policy", "lint"}, 2, "want init, check, test or replay"},
		{"check with broken policy dir", []string{"check", "http", "--policy", syntax, "GET", "https://ok.test/"}, 2, "http.rego:3"},
		{"check usage", []string{"check", "http", "GET"}, 2, "usage: egressd check http [flags] METHOD URL"},
		{"check unknown kind", []string{"check", "smtp", "x"}, 2, "unknown kind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := egressdbin.Output(t, exec.Command(bin, tt.args...))
			if out := stdout + stderr; code != tt.code || !strings.Contains(out, tt.contains) {
				t.Errorf("egressd %s: exit %d, output %q; want exit %d containing %q", strings.Join(tt.args, " "), code, out, tt.code, tt.contains)
			}
		})
	}
}

const miniModule = `package egress.http

decision := {"allow": true, "reason": "allowed", "rule": "mini"} if input.host == "ok.test"
else := {"allow": false, "reason": "no_matching_rule", "rule": ""}
`

// writeDir writes files into a new directory and returns it.
func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
