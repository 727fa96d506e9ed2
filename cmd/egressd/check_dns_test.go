package main

import (
	"encoding/json"
	"testing"
)

func TestCheckDNS(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		code   int
		reason string
		rule   string
	}{
		{name: "allowed host", args: []string{"pypi.org"}, code: 0, reason: "allowed", rule: "pypi"},
		{name: "allowed AAAA", args: []string{"files.pythonhosted.org.", "--qtype", "aaaa"}, code: 0, reason: "allowed", rule: "pypi"},
		{name: "unknown name", args: []string{"exfil.attacker.example"}, code: 1, reason: "no_matching_rule"},
		{name: "txt refused", args: []string{"pypi.org", "--qtype", "TXT"}, code: 1, reason: "qtype_not_allowed"},
		{name: "unknown type", args: []string{"pypi.org", "--qtype", "BOGUS"}, code: 1, reason: "qtype_not_allowed"},
		{name: "metadata name", args: []string{"metadata.google.internal"}, code: 1, reason: "metadata_name"},
		{name: "ip literal", args: []string{"169.254.169.254"}, code: 1, reason: "ip_literal_name"},
		{name: "malformed", args: []string{"a..b"}, code: 1, reason: "malformed_name"},
		{name: "missing name", args: []string{}, code: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(append([]string{"check", "dns"}, tt.args...)...)
			if code != tt.code {
				t.Fatalf("check dns %v exit = %d; want %d (stderr %s)", tt.args, code, tt.code, stderr)
			}
			if tt.code == 2 {
				return
			}
			var out struct {
				Kind, Reason, Rule, Policy string
				Allow                      bool
			}
			if err := json.Unmarshal([]byte(stdout), &out); err != nil {
				t.Fatalf("check dns %v output %q: %v", tt.args, stdout, err)
			}
			if out.Kind != "dns" || out.Reason != tt.reason || out.Rule != tt.rule || out.Allow != (tt.code == 0) || out.Policy == "" {
				t.Errorf("check dns %v = %+v; want kind dns, reason %q, rule %q", tt.args, out, tt.reason, tt.rule)
			}
		})
	}
}
