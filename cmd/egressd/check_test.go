package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egressd/egressd/cmd/egressd/config"
)

func TestCheckIdentityFromConfig(t *testing.T) {
	// A long eval timeout: under -race on a loaded machine the 100ms
	// default could turn a decision into policy_timeout.
	const policy = "policy:\n  eval_timeout: 10s\n"
	cfg := filepath.Join(t.TempDir(), "egressd.yaml")
	if err := os.WriteFile(cfg, []byte(policy+"identities:\n  - id: team\n    sources: [192.0.2.1/32]\n    attributes: {tier: \"1\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	anon := filepath.Join(t.TempDir(), "anonymous.yaml")
	if err := os.WriteFile(anon, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		code     int
		identity string
		stderr   string
	}{
		{"configured identity", []string{"check", "http", "--config", cfg, "--identity", "team", "GET", "http://deb.debian.org/debian/"}, 0, "team", ""},
		{"identity required", []string{"check", "http", "--config", cfg, "GET", "https://pypi.org/simple/"}, 2, "", "--identity is required"},
		{"unknown identity", []string{"check", "connect", "--config", cfg, "--identity", "nobody", "pypi.org:443"}, 2, "", "not in the config"},
		{"anonymous without identities", []string{"check", "connect", "--config", anon, "pypi.org:443"}, 0, "anonymous", ""},
		{"deny exits 1", []string{"check", "http", "--config", anon, "GET", "https://example.com/"}, 1, "anonymous", ""},
		{"parse refusal exits 1", []string{"check", "http", "--config", anon, "GET", "http://2130706433/"}, 1, "anonymous", ""},
		{"bad config", []string{"check", "http", "--config", "/nonexistent.yaml", "GET", "https://pypi.org/"}, 2, "", "read config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := exitCode(run(tt.args, &stdout, &stderr), &stderr)
			if code != tt.code || !strings.Contains(stderr.String(), tt.stderr) {
				t.Fatalf("egressd %v: exit %d, stderr %q; want exit %d, stderr containing %q", tt.args, code, stderr.String(), tt.code, tt.stderr)
			}
			if tt.identity == "" {
				return
			}
			var out checkOutput
			if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
				t.Fatalf("output %q: %v", stdout.String(), err)
			}
			if out.Identity != tt.identity || out.Policy == "" || (code == 0) != out.Allow {
				t.Errorf("egressd %v = %+v; want identity %s, a policy digest, allow %v", tt.args, out, tt.identity, code == 0)
			}
		})
	}
}

// TestDeployExampleParses keeps deploy/egressd.yaml a valid config whose
// policy section documents the defaults.
func TestDeployExampleParses(t *testing.T) {
	c, err := config.Load(filepath.Join("..", "..", "deploy", "egressd.yaml"))
	if err != nil {
		t.Fatalf("config.Load(deploy/egressd.yaml): %v", err)
	}
	if def := config.Default(); c.Policy != def.Policy {
		t.Errorf("deploy/egressd.yaml policy = %+v; want the defaults %+v", c.Policy, def.Policy)
	}
}
