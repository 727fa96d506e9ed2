package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckSQL(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "egressd.yaml")
	if err := os.WriteFile(cfg, []byte("identities:\n  - id: agent\n    attributes: {sql_profile: read_only}\n  - id: plain\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		reason string
		stmts  int
	}{
		{"allowed select", []string{"SELECT lower(name) FROM users WHERE id = 1"}, 0, "allowed", 1},
		{"one denied statement denies the query", []string{"SELECT 1; SELECT pg_read_file('/etc/passwd')"}, 1, "function_not_allowed", 2},
		{"write in read_only", []string{"DELETE FROM users WHERE id = 1"}, 1, "write_denied", 1},
		{"do", []string{"DO $$BEGIN END$$"}, 1, "do_denied", 1},
		{"parse error", []string{"SELEC 1"}, 1, "sql_parse_error", 0},
		{"too complex", []string{"SELECT " + strings.Repeat("(", 5000) + "1" + strings.Repeat(")", 5000)}, 1, "sql_too_complex", 0},
		{"no profile", []string{"--identity", "plain", "SELECT 1"}, 1, "sql_no_profile", 1},
		// Too deep to parse in-process (sqlparse.InProcess): the check
		// parses it in a worker, as the gate does.
		{"deep keyword chain", []string{"SELECT 1" + strings.Repeat(" ISNULL", 9000)}, 0, "allowed", 1},
		{"keyword chain past the walker's bound", []string{"SELECT 1" + strings.Repeat(" ISNULL", 15000)}, 1, "sql_too_complex", 0},
		{"missing sql", []string{}, 2, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"check", "sql", "--config", cfg, "--identity", "agent", "--database", "app"}, tt.args...)
			var stdout, stderr bytes.Buffer
			code := exitCode(run(args, &stdout, &stderr), &stderr)
			if code != tt.code {
				t.Fatalf("check sql %v exit = %d; want %d (stderr %s)", tt.args, code, tt.code, stderr.String())
			}
			if tt.code == 2 {
				return
			}
			var out struct {
				Kind, Reason, Policy string
				Allow                bool
				Facts                []map[string]any
			}
			if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
				t.Fatalf("check sql output %q: %v", stdout.String(), err)
			}
			if out.Kind != "sql" || out.Reason != tt.reason || out.Allow != (tt.code == 0) || out.Policy == "" || len(out.Facts) != tt.stmts {
				t.Errorf("check sql %v = %+v; want kind sql, reason %q, %d statements", tt.args, out, tt.reason, tt.stmts)
			}
		})
	}
}
