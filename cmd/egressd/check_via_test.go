package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egressd/egressd/policy"
)

// TestCheckVia: --via is echoed, decides as the listener it names does
// (a plain http:// request through socks or transparent is a tunnel its
// rule must allow with "tls": false), and takes only the three arrivals.
func TestCheckVia(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "egressd.yaml")
	if err := os.WriteFile(cfg, []byte("policy:\n  eval_timeout: 10s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		kind   string
		via    string
		reason policy.Reason
		stderr string
	}{
		{"connect via socks", []string{"check", "connect", "--config", cfg, "--via", "socks", "pypi.org:443"}, 0, "connect", "socks", "allowed", ""},
		{"http via proxy", []string{"check", "http", "--config", cfg, "--via", "proxy", "GET", "http://deb.debian.org/debian/"}, 0, "http", "", "allowed", ""},
		{"plain http via transparent is a tls-only tunnel", []string{"check", "http", "--config", cfg, "--via", "transparent", "GET", "http://deb.debian.org/debian/"}, 1, "connect", "transparent", policy.ReasonTLSRequired, ""},
		{"https via socks decides as the proxy does", []string{"check", "http", "--config", cfg, "--via", "socks", "GET", "https://pypi.org/simple/"}, 1, "http", "socks", policy.ReasonHTTPSRequiresConnect, ""},
		{"unknown via", []string{"check", "connect", "--config", cfg, "--via", "vpn", "pypi.org:443"}, 2, "", "", "", "want proxy, socks or transparent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.stderr) {
				t.Fatalf("egressd %v: exit %d, stderr %q; want exit %d, stderr containing %q", tt.args, code, stderr, tt.code, tt.stderr)
			}
			if tt.kind == "" {
				return
			}
			var out checkOutput
			if err := json.Unmarshal([]byte(stdout), &out); err != nil {
				t.Fatalf("output %q: %v", stdout, err)
			}
			if out.Kind != tt.kind || out.Via != tt.via || out.Reason != tt.reason {
				t.Errorf("egressd %v = kind %s, via %q, reason %s; want %s, %q, %s", tt.args, out.Kind, out.Via, out.Reason, tt.kind, tt.via, tt.reason)
			}
		})
	}
}
