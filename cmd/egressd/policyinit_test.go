package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPolicyInit writes the embedded bundle, edits its rules the way the
// README shows, and checks the edited bundle still passes its own tests and
// decides with the new rule.
func TestPolicyInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mypolicy")
	var out, errb bytes.Buffer
	if err := run([]string{"policy", "init", dir}, &out, &errb); err != nil {
		t.Fatalf("policy init: %v (%s)", err, errb.String())
	}
	data := `{"rules": [{"id": "docs", "hosts": ["docs.example.com"], "ports": [80], "methods": ["GET"], "paths": ["/guide/**"]}]}`
	if err := os.WriteFile(filepath.Join(dir, "data.json"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run([]string{"policy", "test", dir}, &out, &errb); err != nil {
		t.Fatalf("policy test on the edited bundle: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := run([]string{"check", "http", "--policy", dir, "GET", "http://docs.example.com/guide/a"}, &out, &errb); err != nil {
		t.Fatalf("check with the new rule: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), `"rule":"docs"`) {
		t.Errorf("check output %s; want rule docs", out.String())
	}
	if code := exitCode(run([]string{"policy", "init", dir}, &out, &errb), &errb); code != 2 {
		t.Errorf("policy init into a non-empty dir = exit %d; want 2", code)
	}
}
