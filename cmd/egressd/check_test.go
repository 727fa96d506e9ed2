package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/policy"
)

func TestCheckIdentityFromConfig(t *testing.T) {
	// A long eval timeout: under -race on a loaded machine the 100ms
	// default could turn a decision into policy_timeout.
	const policy = "policy:\n  eval_timeout: 10s\n"
	cfg := writeConfig(t, t.TempDir(), policy+"identities:\n  - id: team\n    sources: [192.0.2.1/32]\n    attributes: {tier: \"1\"}\n")
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
			code, stdout, stderr := runCLI(tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.stderr) {
				t.Fatalf("egressd %v: exit %d, stderr %q; want exit %d, stderr containing %q", tt.args, code, stderr, tt.code, tt.stderr)
			}
			if tt.identity == "" {
				return
			}
			var out checkOutput
			if err := json.Unmarshal([]byte(stdout), &out); err != nil {
				t.Fatalf("output %q: %v", stdout, err)
			}
			if out.Identity != tt.identity || out.Policy == "" || (code == 0) != out.Allow {
				t.Errorf("egressd %v = %+v; want identity %s, a policy digest, allow %v", tt.args, out, tt.identity, code == 0)
			}
		})
	}
}

// TestCheckOutputClass: a deny carries its reason's class, so a caller
// tells "the policy said no" from "the request could not be read"
// without a list of reasons; an allow carries none (issue 25).
func TestCheckOutputClass(t *testing.T) {
	cfg := writeConfig(t, t.TempDir(), "policy:\n  eval_timeout: 10s\n")
	tests := []struct {
		name  string
		args  []string
		class string
	}{
		{"allow", []string{"check", "connect", "--config", cfg, "pypi.org:443"}, ""},
		{"policy deny", []string{"check", "http", "--config", cfg, "GET", "http://example.com/"}, policy.ClassPolicy.String()},
		{"floor deny", []string{"check", "http", "--config", cfg, "GET", "http://169.254.169.254/"}, policy.ClassPolicy.String()},
		{"malformed", []string{"check", "http", "--config", cfg, "GET", "http://exa mple.com/"}, policy.ClassMalformed.String()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, stdout, stderr := runCLI(tt.args...)
			var out map[string]any
			if err := json.Unmarshal([]byte(stdout), &out); err != nil {
				t.Fatalf("egressd %v output %q (stderr %q): %v", tt.args, stdout, stderr, err)
			}
			got, present := out["class"]
			if tt.class == "" && present || tt.class != "" && got != tt.class {
				t.Errorf("egressd %v: class = %v (present %v), reason %v; want %q", tt.args, got, present, out["reason"], tt.class)
			}
		})
	}
}

// TestCheckObservingIdentity: check answers what the proxy would do for an
// identity in observe mode: allow, with what would be denied.
func TestCheckObservingIdentity(t *testing.T) {
	cfg := writeConfig(t, t.TempDir(), "policy:\n  eval_timeout: 10s\nidentities:\n  - id: watcher\n    sources: [192.0.2.2/32]\n    mode: observe\n")
	code, stdout, stderr := runCLI("check", "http", "--config", cfg, "--identity", "watcher", "GET", "http://example.com/")
	var out checkOutput
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || code != 0 {
		t.Fatalf("check = exit %d, %q (stderr %q), %v; want exit 0 and JSON", code, stdout, stderr, err)
	}
	if w := out.WouldDeny; !out.Allow || w == nil || w.Reason != policy.ReasonNoMatchingRule || w.By != policy.ObservedByIdentity {
		t.Errorf("check = %s; want allow with would_deny no_matching_rule by identity", stdout)
	}
	if !strings.Contains(stdout, `"would_deny":{"reason":"no_matching_rule","by":"identity"}`) {
		t.Errorf("check printed %s; want would_deny spelled out", stdout)
	}
}

// TestDeployExampleParses keeps deploy/egressd.yaml a valid config whose
// policy section documents the defaults.
func TestDeployExampleParses(t *testing.T) {
	c, err := config.Load(filepath.Join("..", "..", "deploy", "egressd.yaml"))
	if err != nil {
		t.Fatalf("config.Load(deploy/egressd.yaml): %v", err)
	}
	if def := config.Default(); !reflect.DeepEqual(c.Policy, def.Policy) {
		t.Errorf("deploy/egressd.yaml policy = %+v; want the defaults %+v", c.Policy, def.Policy)
	}
}

// TestCheckInput: `check <kind> --input` prints the Rego input of every
// decision, as the engine built it: the refusal facts as input.flags (the
// key the base rules read, not the output's path_flags), input.views for
// http and connect, one input per SQL statement after the connect.
func TestCheckInput(t *testing.T) {
	cfg := writeConfig(t, t.TempDir(), "policy:\n  eval_timeout: 10s\nidentities:\n  - id: agent\n    sources: [192.0.2.1/32]\n    attributes: {sql_profile: read_only}\n")
	tests := []struct {
		name string
		args []string
		// want are fields of each input object, in order of decision.
		want []map[string]any
	}{
		{"http", []string{"http", "GET", "http://deb.debian.org/debian/%2e%2e/x"}, []map[string]any{{
			"kind": "http", "method": "GET", "host": "deb.debian.org", "port": 80.0,
			"path": "/debian/%2e%2e/x", "path_decoded": "/debian/../x",
			"flags": []any{"encoded_dot", "dot_segment"},
		}}},
		{"connect", []string{"connect", "pypi.org:443"}, []map[string]any{{
			"kind": "connect", "host": "pypi.org", "port": 443.0, "flags": []any{},
		}}},
		{"dns", []string{"dns", "--qtype", "AAAA", "files.pythonhosted.org."}, []map[string]any{{
			"kind": "dns", "name": "files.pythonhosted.org", "qtype": "AAAA",
		}}},
		{"sql", []string{"sql", "--database", "app", "SELECT 1; DELETE FROM users WHERE id = 1"}, []map[string]any{
			{"kind": "sql", "database": "app"},
			{"kind": "sql", "database": "app"},
			{"kind": "sql", "database": "app"},
		}},
		{"refused before the policy", []string{"http", "GET", "http://2130706433/"}, []map[string]any{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"check", tt.args[0], "--config", cfg, "--identity", "agent", "--input"}, tt.args[1:]...)
			var stdout, stderr bytes.Buffer
			if code := exitCode(run(args, &stdout, &stderr), &stderr); code == 2 {
				t.Fatalf("egressd %v: exit 2, stderr %s", args, stderr.String())
			}
			var out struct {
				Input *[]map[string]any
			}
			if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
				t.Fatalf("egressd %v output %q: %v", args, stdout.String(), err)
			}
			if out.Input == nil {
				t.Fatalf("egressd %v printed no input: %s", args, stdout.String())
			}
			got := *out.Input
			if len(got) != len(tt.want) {
				t.Fatalf("egressd %v printed %d inputs; want %d: %s", args, len(got), len(tt.want), stdout.String())
			}
			for i, w := range tt.want {
				for k, v := range w {
					if !reflect.DeepEqual(got[i][k], v) {
						t.Errorf("input[%d].%s = %#v; want %#v", i, k, got[i][k], v)
					}
				}
				if _, ok := got[i]["path_flags"]; ok {
					t.Errorf("input[%d] has path_flags; Rego reads flags", i)
				}
				if id, _ := got[i]["identity"].(map[string]any); id["id"] != "agent" {
					t.Errorf("input[%d].identity = %v; want agent's", i, got[i]["identity"])
				}
			}
			if tt.args[0] == "http" || tt.args[0] == "connect" {
				for i := range got {
					if _, ok := got[i]["views"]; !ok {
						t.Errorf("input[%d] has no views: the rule views are part of what Rego sees", i)
					}
				}
			}
		})
	}
	t.Run("not asked", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		exitCode(run([]string{"check", "connect", "--config", cfg, "--identity", "agent", "pypi.org:443"}, &stdout, &stderr), &stderr)
		if bytes.Contains(stdout.Bytes(), []byte(`"input"`)) {
			t.Errorf("check without --input printed an input: %s", stdout.String())
		}
	})
}

// TestCheckInspected: `check connect` says when the proxy would terminate
// a tunnel ("inspect"), and `check http` decides an https:// URL as a
// request inside that tunnel ("inspected"), with the default bundle's
// read-only GitHub rule; other https:// URLs are refused as before.
func TestCheckInspected(t *testing.T) {
	cfg := writeConfig(t, t.TempDir(), "policy:\n  eval_timeout: 10s\n")
	tests := []struct {
		name               string
		args               []string
		code               int
		reason             policy.Reason
		inspect, inspected bool
	}{
		{"connect inspected", []string{"connect", "api.github.com:443"}, 0, "allowed", true, false},
		{"connect opaque", []string{"connect", "pypi.org:443"}, 0, "allowed", false, false},
		{"inner read", []string{"http", "GET", "https://api.github.com/repos/o/r"}, 0, "allowed", false, true},
		{"inner write", []string{"http", "POST", "https://api.github.com/repos/o/r/issues"}, 1, "no_matching_rule", false, true},
		{"inner encoded slash", []string{"http", "GET", "https://api.github.com/repos/o%2Fr"}, 1, "encoded_separator", false, true},
		{"inner fronted", []string{"http", "--host-header", "evil.example", "GET", "https://api.github.com/repos/o/r"}, 1, "host_mismatch", false, true},
		{"https not inspected", []string{"http", "GET", "https://pypi.org/simple/"}, 1, "https_requires_connect", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"check", tt.args[0], "--config", cfg}, tt.args[1:]...)
			code, stdout, _ := runCLI(args...)
			var out checkOutput
			if err := json.Unmarshal([]byte(stdout), &out); err != nil {
				t.Fatalf("egressd %v output %q: %v", args, stdout, err)
			}
			if code != tt.code || out.Reason != tt.reason || out.Inspect != tt.inspect || out.Inspected != tt.inspected {
				t.Errorf("egressd %v = exit %d %s; want exit %d, reason %s, inspect %v, inspected %v", args, code, stdout, tt.code, tt.reason, tt.inspect, tt.inspected)
			}
		})
	}
}
