package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/dnsguard/dnstest"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/internal/pgtest"
	"github.com/egressd/egressd/internal/testport"
)

// TestPostgresGate drives `egressd serve` with postgres.listen set, with
// psql as the client and a real PostgreSQL behind the gate: allowed queries
// return the rows a direct connection returns, denied ones answer 42501 and
// leave the session usable, a deny inside a transaction commits nothing, and
// every statement is audited without its literals.
func TestPostgresGate(t *testing.T) {
	const roPass, rwPass = "ro-secret", "rw-secret"
	e, pg, gate := startGate(t, "CREATE TABLE notes (id int PRIMARY KEY, body text); INSERT INTO notes VALUES (1, 'alpha'), (2, 'beta')",
		gateIdentity{"agent-ro", roPass, "read_only"}, gateIdentity{"agent-rw", rwPass, "read_write"})

	// session runs psql through the gate as user with script on stdin and
	// args after the connection flags. A psql still running after a
	// minute fails t with egressd's goroutines: this test once hung under
	// load, and a hang must leave evidence, not a stalled run.
	session := func(t *testing.T, user, pass, script string, args ...string) (string, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, pg.Bin("psql"), append([]string{"-X", "-A", "-t",
			"-h", "127.0.0.1", "-p", strings.TrimPrefix(gate, "127.0.0.1:"), "-U", user, "-d", "app"}, args...)...)
		cmd.Env = append(cleanEnv(), "PGPASSWORD="+pass, "PGSSLMODE=disable", "PGCONNECT_TIMEOUT=10")
		cmd.Stdin = strings.NewReader(script)
		cmd.WaitDelay = 5 * time.Second
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if ctx.Err() != nil {
			_, stacks, serr := e.Admin("GET", "/debug/pprof/goroutine?debug=2")
			t.Fatalf("psql as %s running %q did not end in a minute; egressd's goroutines (%v):\n%s", user, script+strings.Join(args, " "), serr, stacks)
		}
		return out.String(), errb.String(), err
	}
	psql := func(t *testing.T, user, pass, sql string) (string, string, error) {
		return session(t, user, pass, "", "-v", "ON_ERROR_STOP=1", "-c", sql)
	}

	out, stderr, err := psql(t, "agent-ro", roPass, "SELECT body FROM notes ORDER BY id")
	if err != nil || out != "alpha\nbeta\n" {
		t.Fatalf("read-only SELECT = %q, %v (%s); want alpha beta", out, err, stderr)
	}
	if _, stderr, err = psql(t, "agent-ro", "wrong", "SELECT 1"); err == nil || !strings.Contains(stderr, "authentication failed") {
		t.Errorf("wrong password = %v, %q; want authentication failed", err, stderr)
	}
	// Logins and statements are counted like the proxy's requests (issue
	// 17 item 6): one login each way so far, and the SELECT's allow.
	m := e.Metrics(t)
	for series, want := range map[string]float64{
		`egressd_postgres_logins_total{decision="allow",reason="allowed"}`:              1,
		`egressd_postgres_logins_total{decision="deny",reason="authentication_failed"}`: 1,
	} {
		if got := metricValue(t, m, series); got != want {
			t.Errorf("%s = %v; want %v", series, got, want)
		}
	}
	if got := metricValue(t, m, `egressd_decisions_total{decision="allow",kind="sql",reason="allowed"}`); got < 1 {
		t.Errorf("sql allows counted = %v; want the SELECT's", got)
	}

	denied := []struct {
		name, user, pass, sql, reason string
	}{
		{"write in read_only", "agent-ro", roPass, "DELETE FROM notes WHERE id = 1", ""},
		{"server file read", "agent-ro", roPass, "SELECT pg_read_file('/etc/passwd')", "function_not_allowed"},
		{"COPY PROGRAM", "agent-rw", rwPass, "COPY notes FROM PROGRAM 'id'", ""},
		{"DELETE without WHERE", "agent-rw", rwPass, "DELETE FROM notes", ""},
		{"DDL", "agent-rw", rwPass, "DROP TABLE notes", ""},
	}
	for _, tt := range denied {
		t.Run(tt.name, func(t *testing.T) {
			_, stderr, err := psql(t, tt.user, tt.pass, tt.sql)
			if err == nil || !strings.Contains(stderr, "egressd: denied: "+tt.reason) {
				t.Fatalf("psql %q = %v, %q; want egressd: denied: %s", tt.sql, err, stderr, tt.reason)
			}
		})
	}

	// One session: a deny inside BEGIN … COMMIT fails the whole transaction
	// upstream, and the session stays usable afterwards.
	script := "BEGIN;\nINSERT INTO notes VALUES (3, 'gamma');\nDELETE FROM notes;\nCOMMIT;\nSELECT count(*) FROM notes;\n"
	// psql exits non-zero on the deny; the output says what happened.
	sout, serr, _ := session(t, "agent-rw", rwPass, script)
	if !strings.Contains(serr, "egressd: denied:") || !strings.HasSuffix(sout, "2\n") {
		t.Errorf("transaction session: stdout %q stderr %q; want a deny and count 2 afterwards", sout, serr)
	}
	if out, stderr, err := psql(t, "agent-ro", roPass, "SELECT count(*) FROM notes WHERE id = 3"); err != nil || out != "0\n" {
		t.Errorf("row of the failed transaction = %q, %v (%s); want 0 (nothing committed)", out, err, stderr)
	}

	recs := e.WaitRecords(t, "sql deny for pg_read_file", func(r audit.Record) bool {
		return r.Kind == "sql" && r.Decision == "deny" && r.Reason == "function_not_allowed"
	})
	if strings.Contains(recs[0].SQL, "/etc/passwd") || recs[0].Fingerprint == "" || recs[0].Identity != "agent-ro" {
		t.Errorf("audit record %+v; want normalized SQL without the literal, a fingerprint and identity agent-ro", recs[0])
	}
	VerifyAudit(t, e)
}

// gateIdentity is a sandbox identity of the Postgres gate: its id,
// password and SQL profile.
type gateIdentity struct{ id, password, profile string }

// startAppDB starts a PostgreSQL with a database app holding schema.
func startAppDB(t *testing.T, schema string) *pgtest.Server {
	t.Helper()
	pg := pgtest.Start(t, pgtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pg.Exec(ctx, "postgres", "CREATE DATABASE app"); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(ctx, "app", schema); err != nil {
		t.Fatal(err)
	}
	return pg
}

// startGate starts a PostgreSQL whose database app holds schema, and
// egressd with its Postgres gate in front of it for ids. It returns
// egressd, the server and the gate's address.
func startGate(t *testing.T, schema string, ids ...gateIdentity) (*Egressd, *pgtest.Server, string) {
	t.Helper()
	return startGateUnder(t, nil, schema, ids...)
}

// startGateUnder is startGate with egressd run under wrap (see
// Options.Wrap).
func startGateUnder(t *testing.T, wrap []string, schema string, ids ...gateIdentity) (*Egressd, *pgtest.Server, string) {
	t.Helper()
	pg := startAppDB(t, schema)
	pwFile := filepath.Join(t.TempDir(), "upstream-password")
	if err := os.WriteFile(pwFile, []byte(pgtest.SuperPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var idYAML strings.Builder
	for _, id := range ids {
		ver, err := identity.SCRAMVerifier(id.password, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&idYAML, "  - id: %s\n    scram_sha256: %q\n    attributes: {sql_profile: %s}\n", id.id, ver, id.profile)
	}
	held := ReservePort(t)
	gate := held.Addr()
	e := Start(t, Options{Wrap: wrap, Hold: []*testport.Reservation{held}, DNS: dnstest.Start(t).Addr(), YAML: fmt.Sprintf(`postgres:
  listen: %s
  upstream: "host=127.0.0.1 port=%d user=%s sslmode=disable"
  password_file: %s
identities:
%s%s`, gate, pg.Port, pgtest.SuperUser, pwFile, idYAML.String(), InternalAllow(pg.Addr()))})
	return e, pg, gate
}
