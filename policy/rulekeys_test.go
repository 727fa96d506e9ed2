package policy

import (
	"slices"
	"strings"
	"testing"
)

// TestUnknownRuleKey is issue 25 item 5: an unknown rule key's error
// lists every key the decoder accepts and suggests the nearest.
func TestUnknownRuleKey(t *testing.T) {
	for _, k := range []string{"id", "hosts", "inspect", "credentials", "comment"} {
		if !slices.Contains(ruleKeys, k) {
			t.Errorf("ruleKeys = %v; want %q in it", ruleKeys, k)
		}
	}
	tests := []struct {
		key, want string
	}{
		{`"port"`, `did you mean "ports"?`},
		{`"host"`, `did you mean "hosts"?`},
		{`"Methods"`, `did you mean "methods"?`},
		{`"inspection"`, `did you mean "inspect"?`},
		{`"credential"`, `did you mean "credentials"?`},
		{`"max_body_byte"`, `did you mean "max_body_bytes"?`},
		{`"frobnicate"`, "a rule has id, hosts,"},
	}
	for _, tt := range tests {
		got := unknownRuleKey(tt.key)
		if !strings.HasPrefix(got, tt.want) || !strings.HasSuffix(got, " and comment") {
			t.Errorf("unknownRuleKey(%s) = %q; want it to begin %q and list every key", tt.key, got, tt.want)
		}
		if strings.HasPrefix(tt.want, "a rule") && strings.Contains(got, "did you mean") {
			t.Errorf("unknownRuleKey(%s) = %q; want no suggestion", tt.key, got)
		}
	}
}

// TestValidateRuleHostAsTarget: a host written as a URL or host:port
// says so and what to write instead; IPv6 addresses and names pass.
func TestValidateRuleHostAsTarget(t *testing.T) {
	tests := []struct {
		host, want string // want "" means valid
	}{
		{"https://pypi.org/simple/", `is a URL: write its host "pypi.org" in hosts and its port 443 in ports`},
		{"http://docs.example.com:8080", `is a URL: write its host "docs.example.com" in hosts and its port 8080 in ports`},
		{"ftp://files.example.com", `is a URL: write its host "files.example.com" in hosts and its port in ports`},
		{"pypi.org:443", `is host:port: write the host "pypi.org" in hosts and the port 443 in ports`},
		{"[2001:db8::1]:443", `is host:port: write the host "2001:db8::1" in hosts and the port 443 in ports`},
		{"10.0.0.7:5432", `is host:port: write the host "10.0.0.7" in hosts and the port 5432 in ports`},
		{"2001:db8::1", ""},
		{"pypi.org", ""},
		{"*.pypi.org", ""},
	}
	for _, tt := range tests {
		err := validateRuleHost(tt.host)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("validateRuleHost(%q) = %v; want %q", tt.host, err, tt.want)
		}
	}
}
