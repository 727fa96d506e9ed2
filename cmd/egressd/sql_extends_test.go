package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestSQLProfileExtends is issue 25 item 8: a profile that extends
// read_only with one schema reads that schema and is read_only otherwise,
// without copying read_only's keys.
func TestSQLProfileExtends(t *testing.T) {
	dir := t.TempDir()
	bundle := filepath.Join(dir, "mypolicy")
	if code, _, errb := runCLI("policy", "init", bundle); code != 0 {
		t.Fatalf("policy init: exit %d: %s", code, errb)
	}
	dataPath := filepath.Join(bundle, "sql", "data.json")
	b, err := os.ReadFile(dataPath)
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(b, &data); err != nil {
		t.Fatal(err)
	}
	data["profiles"].(map[string]any)["billing_reader"] = map[string]any{"extends": "read_only", "read": []any{"billing.*"}}
	if b, err = json.Marshal(data); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dataPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, dir, "policy:\n  dir: "+bundle+"\n  eval_timeout: 10s\nidentities:\n"+
		"  - {id: billing, sources: [192.0.2.1/32], attributes: {sql_profile: billing_reader}}\n"+
		"  - {id: reader, sources: [192.0.2.2/32], attributes: {sql_profile: read_only}}\n")
	tests := []struct {
		identity, sql, reason string
	}{
		{"billing", "SELECT total FROM billing.invoices", "allowed"},
		{"billing", "SELECT name FROM users WHERE id = 1", "allowed"},
		{"billing", "DELETE FROM billing.invoices WHERE id = 1", "write_denied"},
		{"billing", "SELECT pg_read_file('/etc/passwd')", "function_not_allowed"},
		{"reader", "SELECT total FROM billing.invoices", "table_not_allowed"},
	}
	for _, tt := range tests {
		_, stdout, stderr := runCLI("check", "sql", "--config", cfg, "--identity", tt.identity, "--database", "app", tt.sql)
		var out struct{ Reason string }
		if err := json.Unmarshal([]byte(stdout), &out); err != nil || out.Reason != tt.reason {
			t.Errorf("check sql --identity %s %q = %s (stderr %s); want reason %s", tt.identity, tt.sql, stdout, stderr, tt.reason)
		}
	}
}
