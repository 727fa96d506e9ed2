package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/pgtest"
	"github.com/egressd/egressd/policy"
)

func TestCheckSQL(t *testing.T) {
	// eval_timeout: decisions are under test, not evaluation time (a cold
	// one hit the 100 ms default on a loaded machine).
	cfg := writeConfig(t, t.TempDir(), "policy:\n  eval_timeout: 10s\nidentities:\n  - id: agent\n    sources: [192.0.2.1/32]\n    attributes: {sql_profile: read_only}\n  - id: plain\n    sources: [192.0.2.2/32]\n")
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
			code, stdout, stderr := runCLI(args...)
			if code != tt.code {
				t.Fatalf("check sql %v exit = %d; want %d (stderr %s)", tt.args, code, tt.code, stderr)
			}
			if tt.code == 2 {
				return
			}
			var out struct {
				Kind, Reason, Policy string
				Allow                bool
				Facts                []map[string]any
			}
			if err := json.Unmarshal([]byte(stdout), &out); err != nil {
				t.Fatalf("check sql output %q: %v", stdout, err)
			}
			if out.Kind != "sql" || out.Reason != tt.reason || out.Allow != (tt.code == 0) || out.Policy == "" || len(out.Facts) != tt.stmts {
				t.Errorf("check sql %v = %+v; want kind sql, reason %q, %d statements", tt.args, out, tt.reason, tt.stmts)
			}
		})
	}
}

// TestCheckRefusesUnknownSQLProfile: a config whose identity names a SQL
// profile the bundle lacks is a load error for `egressd check` as for
// serve (exit 2, naming the file and the key), not a sql_no_profile deny
// (item 17).
func TestCheckRefusesUnknownSQLProfile(t *testing.T) {
	cfg := writeConfig(t, t.TempDir(), "identities:\n  - id: agent\n    sources: [192.0.2.1/32]\n    attributes: {sql_profile: read_olny}\n")
	code, _, stderr := runCLI("check", "sql", "--config", cfg, "--identity", "agent", "SELECT 1")
	want := cfg + `: identities[0].attributes.sql_profile "read_olny" is not a profile`
	if code != 2 || !strings.Contains(stderr, want) {
		t.Errorf("check sql = exit %d, %q; want exit 2 containing %q", code, stderr, want)
	}
}

// checkSQLOut runs `egressd check sql` and decodes its output.
func checkSQLOut(t *testing.T, args ...string) (code int, out checkOutput) {
	t.Helper()
	code, stdout, _ := runCLI(append([]string{"check", "sql"}, args...)...)
	if code != 2 {
		if err := json.Unmarshal([]byte(stdout), &out); err != nil {
			t.Fatalf("check sql output %q: %v", stdout, err)
		}
	}
	return code, out
}

// Finding (issue 12): a user operator's function and an overload of a
// built-in name: `egressd check sql --catalog` resolves them against the
// upstream catalog; without --catalog it dials nothing, even with an
// upstream configured (issue 25: a check in CI must not reach the real
// database unasked), and says it assumes built-ins.
func TestCheckSQLResolvesAgainstUpstream(t *testing.T) {
	pg := pgtest.Start(t, pgtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pg.Exec(ctx, "postgres", "CREATE DATABASE app"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "app", `
		CREATE FUNCTION app_purge(int, int) RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;
		CREATE OPERATOR #!# (LEFTARG = int, RIGHTARG = int, PROCEDURE = app_purge);
		CREATE FUNCTION public.lower(int) RETURNS text LANGUAGE sql AS $$ SELECT 'x' $$;`); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ids := "policy:\n  eval_timeout: 10s\nidentities:\n  - id: agent\n    sources: [192.0.2.1/32]\n    attributes: {sql_profile: read_only}\n"
	plain := filepath.Join(dir, "plain.yaml")
	withUpstream := filepath.Join(dir, "upstream.yaml")
	badUpstream := filepath.Join(dir, "bad.yaml")
	t.Setenv("CHECK_SQL_PG_PASSWORD", pgtest.SuperPassword)
	for name, body := range map[string]string{
		plain:        ids,
		withUpstream: ids + fmt.Sprintf("postgres:\n  upstream: postgres://%s@%s/?sslmode=disable\n  password_env: CHECK_SQL_PG_PASSWORD\n", pgtest.SuperUser, pg.Addr()),
		badUpstream:  ids + fmt.Sprintf("postgres:\n  upstream: postgres://nobody@%s/?sslmode=disable\n  password_env: CHECK_SQL_PG_PASSWORD\n", pg.Addr()),
	} {
		if err := os.WriteFile(name, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name, cfg, sql string
		catalog        bool
		code           int
		reason         policy.Reason
		builtinsOnly   bool
	}{
		{"operator without upstream", plain, "SELECT 1 #!# 2", false, 0, "allowed", true},
		{"operator with upstream, no --catalog", withUpstream, "SELECT 1 #!# 2", false, 0, "allowed", true},
		{"operator with upstream", withUpstream, "SELECT 1 #!# 2", true, 1, "function_not_allowed", false},
		{"overload without upstream", plain, "SELECT lower(42)", false, 0, "allowed", true},
		{"overload with upstream", withUpstream, "SELECT lower(42)", true, 1, "function_not_allowed", false},
		{"built-in with upstream", withUpstream, "SELECT upper('a') || 'b'", true, 0, "allowed", false},
		{"unreadable catalog", badUpstream, "SELECT 1", true, 1, "catalog_unavailable", false},
		// The login the bad upstream refuses is never tried.
		{"unreadable catalog, no --catalog", badUpstream, "SELECT 1", false, 0, "allowed", true},
		{"--catalog without upstream", plain, "SELECT 1", true, 1, "catalog_unavailable", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"--config", tt.cfg, "--identity", "agent", "--database", "app", tt.sql}
			if tt.catalog {
				args = append([]string{"--catalog"}, args...)
			}
			code, out := checkSQLOut(t, args...)
			if code != tt.code || out.Reason != tt.reason || (out.Assumes != "") != tt.builtinsOnly {
				t.Errorf("check sql %q = exit %d, %+v; want exit %d, reason %q, assumes set %v", tt.sql, code, out, tt.code, tt.reason, tt.builtinsOnly)
			}
		})
	}
}
