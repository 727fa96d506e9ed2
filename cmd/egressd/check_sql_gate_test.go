package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/internal/pgtest"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/pggate"
)

// `egressd check sql` answers what the gate does, statement by statement
// (issue 11 item 15: check printed the SELECT of "SELECT …; DELETE …" as
// allowed while the gate denied it other_statement_denied).
func TestCheckSQLMatchesGate(t *testing.T) {
	srv := pgtest.Start(t, pgtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.Exec(ctx, "postgres", "CREATE DATABASE app"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Exec(ctx, "app", "CREATE TABLE users (id int PRIMARY KEY, name text); CREATE TABLE items (id int, note text)"); err != nil {
		t.Fatal(err)
	}
	const pass = "check-sql-gate-pw"
	verifier, err := identity.SCRAMVerifier(pass, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A generous eval_timeout: on a shared machine a cold first evaluation
	// can pass the default 100ms, and a policy_timeout on one side only
	// would be a false difference.
	yaml := fmt.Sprintf("policy:\n  eval_timeout: 30s\nidentities:\n  - id: ro\n    scram_sha256: %q\n    attributes: {sql_profile: read_only}\n  - id: rw\n    scram_sha256: %q\n    attributes: {sql_profile: read_write}\n", verifier, verifier)
	cfgFile := writeConfig(t, t.TempDir(), yaml)
	cfg, err := config.Load(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := policy.New(ctx, cfg.Policy, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ids, err := identity.New(cfg.Identities)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("CHECK_SQL_GATE_PW", pgtest.SuperPassword)
	gc := cfg.Postgres
	gc.Listen = "127.0.0.1:0"
	gc.Upstream = fmt.Sprintf("postgres://%s@%s/?sslmode=disable", pgtest.SuperUser, srv.Addr())
	gc.PasswordEnv = "CHECK_SQL_GATE_PW"
	rec := &audittest.Recorder{}
	var d net.Dialer
	g, err := pggate.New(gc, pggate.Deps{Engine: eng, Identities: ids, Audit: rec, Dial: d.DialContext})
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(pgtest.ServeGate(t, g))
	sessions := map[string]*pgconn.PgConn{}
	for _, id := range []string{"ro", "rw"} {
		c, err := pgconn.Connect(ctx, fmt.Sprintf("host=%s port=%s user=%s password=%s dbname=app sslmode=disable", host, port, id, pass))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		sessions[id] = c
	}

	tests := []struct{ name, identity, sql string }{
		{"select then delete", "ro", "SELECT 1; DELETE FROM items WHERE id = 1"},
		{"delete then select", "ro", "DELETE FROM items WHERE id = 1; SELECT 1"},
		{"select then denied function", "ro", "SELECT 1; SELECT pg_read_file('/etc/passwd'); SELECT 2"},
		{"all allowed", "ro", "SELECT 1; SELECT id FROM users"},
		{"delete without where among updates", "rw", "UPDATE items SET note = 'x' WHERE id = 1; DELETE FROM items"},
		{"parse error after a statement", "ro", "SELECT 1; SELEC 2"},
		{"too many statements", "ro", strings.Repeat("SELECT 1;", 101)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The gate: the query's error, and one audit record per statement.
			before := rec.Len()
			_, err := sessions[tt.identity].Exec(ctx, tt.sql).ReadAll()
			gateReason := "allowed"
			if err != nil {
				var pe *pgconn.PgError
				if !errors.As(err, &pe) || !strings.HasPrefix(pe.Message, "egressd: denied: ") {
					t.Fatalf("gate %q = %v; want allowed or an egressd deny", tt.sql, err)
				}
				gateReason = strings.TrimPrefix(pe.Message, "egressd: denied: ")
			}
			var gateStmts []string
			for _, r := range rec.Since(before) {
				gateStmts = append(gateStmts, r.Decision.String()+" "+r.Reason)
			}

			code, stdout, stderr := runCLI("check", "sql", "--config", cfgFile, "--identity", tt.identity, "--database", "app", tt.sql)
			var out struct {
				Allow  bool
				Reason string
				Facts  []struct{ Decision policy.Decision }
			}
			if err := json.Unmarshal([]byte(stdout), &out); err != nil || code == 2 {
				t.Fatalf("check sql %q: exit %d, %v (stderr %s)", tt.sql, code, err, stderr)
			}
			checkReason := out.Reason
			if out.Allow {
				checkReason = "allowed"
			}
			var checkStmts []string
			for _, f := range out.Facts {
				checkStmts = append(checkStmts, audit.DecisionOf(f.Decision.Allow).String()+" "+f.Decision.Reason.String())
			}
			if len(checkStmts) == 0 && !out.Allow {
				// A refusal before the parser is one record with the query's reason.
				checkStmts = []string{"deny " + out.Reason}
			}
			if checkReason != gateReason || strings.Join(checkStmts, ",") != strings.Join(gateStmts, ",") {
				t.Errorf("check sql %q = %s %v; gate = %s %v", tt.sql, checkReason, checkStmts, gateReason, gateStmts)
			}
		})
	}
}
