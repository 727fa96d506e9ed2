package e2e

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/policy/sqlparse"
	"github.com/egressd/egressd/policy/sqlparse/deepsql"
)

// TestDeepSQLDoesNotKillEgressd sends the texts that used to end the whole
// process (SIGSEGV inside libpg_query: ISNULL and NOTNULL chains, NATURAL
// and CROSS JOIN chains) and the deep-construct generator's largest case of
// every production, each through a simple Query and an extended-protocol
// Parse, to the built binary. Each gets an answer and an audit record; the
// process stays up; the same session and a new one then run SELECT 1; and
// the HTTP proxy still answers.
func TestDeepSQLDoesNotKillEgressd(t *testing.T) {
	const pass = "ro-secret"
	e, _, gate := startGate(t, "CREATE TABLE t (a int)", gateIdentity{"agent-ro", pass, "read_only"})
	dsn := fmt.Sprintf("host=127.0.0.1 port=%s user=agent-ro password=%s dbname=app sslmode=disable",
		strings.TrimPrefix(gate, "127.0.0.1:"), pass)

	type crashCase struct {
		name string
		sql  string
		// text: the record must show the (redacted) text, which the
		// process used to die before logging.
		text bool
	}
	cases := []crashCase{
		{"isnull x30000", "SELECT 1" + strings.Repeat(" ISNULL", 30000), true},
		{"notnull x30000", "SELECT 1" + strings.Repeat(" NOTNULL", 30000), true},
		{"natural join x65000", "SELECT 1 FROM t" + strings.Repeat(" NATURAL JOIN t", 65000), true},
		{"cross join x75000", "SELECT 1 FROM t" + strings.Repeat(" CROSS JOIN t", 75000), true},
	}
	for _, c := range deepsql.Constructs {
		// 116,000 statements in one query is not deep; it is the
		// statements-per-query cap's case (and its 116,000 audit records
		// would fill the audit queue).
		if c.Name == "statements" {
			continue
		}
		cases = append(cases, crashCase{name: c.Name + " largest", sql: c.Text(c.MaxN(1 << 20))})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			start := time.Now()
			defer func() { t.Logf("%s: %v", tc.name, time.Since(start)) }()
			c, err := pgconn.Connect(ctx, dsn)
			if err != nil {
				t.Fatalf("connect: %v (egressd exited: %v)", err, e.Exited())
			}
			defer c.Close(context.Background())
			client := c.Conn().LocalAddr().String()
			_, err = c.Exec(ctx, tc.sql).ReadAll()
			answered(t, "Query", err)
			_, err = c.Prepare(ctx, "", tc.sql, nil)
			answered(t, "Parse", err)
			if e.Exited() {
				t.Fatalf("egressd exited after %s:\n%s", tc.name, e.Log())
			}
			selectOne(t, ctx, c, "the same session")
			// Records are written in order: once the SELECT 1 is in the
			// log, the Query's and the Parse's are too.
			e.WaitRecords(t, "of SELECT 1 after "+tc.name, func(r audit.Record) bool {
				return r.Kind == "sql" && r.Client == client && r.SQL == "SELECT $1"
			})
			n, texts := 0, 0
			red, err := sqlparse.Redact(tc.sql)
			if err != nil {
				t.Fatalf("Redact(%s) = %v", tc.name, err)
			}
			prefix := red[:24]
			for _, r := range e.Records(t) {
				if r.Kind == "sql" && r.Client == client {
					n++
					if strings.HasPrefix(r.SQL, prefix) {
						texts++
					}
				}
			}
			if n < 3 {
				t.Errorf("%d audit records for the Query, the Parse and SELECT 1; want 3 or more", n)
			}
			if tc.text && texts < 2 {
				t.Errorf("%d audit records with SQL %q…; want the Query's and the Parse's", texts, prefix)
			}
			fresh, err := pgconn.Connect(ctx, dsn)
			if err != nil {
				t.Fatalf("connect after %s: %v", tc.name, err)
			}
			defer fresh.Close(context.Background())
			selectOne(t, ctx, fresh, "a new session")
		})
	}
	if e.Exited() {
		t.Fatalf("egressd exited:\n%s", e.Log())
	}
	resp, err := e.Client("", "").Get("http://denied.example/")
	if err != nil {
		t.Fatalf("HTTP proxy after the deep SQL: %v", err)
	}
	resp.Body.Close()
	VerifyAudit(t, e)
}

// TestDepthBehindCRDoesNotKillEgressd is the reported crasher: a 32,753-byte
// read_only query whose depth hid behind a `--` comment ended by a lone CR
// (PostgreSQL ends the comment there; the old Go lexer did not) was judged
// shallow, parsed in-process and ended the whole process with SIGSEGV
// under a 2 MiB stack. egressd runs here under a 2 MiB RLIMIT_STACK.
func TestDepthBehindCRDoesNotKillEgressd(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Fatalf("prlimit (util-linux) is needed to lower egressd's RLIMIT_STACK: %v", err)
	}
	const pass = "ro-secret"
	e, _, gate := startGateUnder(t, []string{prlimit, "--stack=2097152"}, "CREATE TABLE t (a int)", gateIdentity{"agent-ro", pass, "read_only"})
	dsn := fmt.Sprintf("host=127.0.0.1 port=%s user=agent-ro password=%s dbname=app sslmode=disable",
		strings.TrimPrefix(gate, "127.0.0.1:"), pass)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer c.Close(context.Background())
	sql := "SELECT 1 --\r" + strings.Repeat("+1", 16370)
	_, err = c.Exec(ctx, sql).ReadAll()
	answered(t, "Query", err)
	if e.Exited() {
		t.Fatalf("egressd exited after the %d-byte query:\n%s", len(sql), e.Log())
	}
	selectOne(t, ctx, c, "the same session")
}

// answered fails unless err is nil (a result) or a server ErrorResponse:
// anything else means the connection broke.
func answered(t *testing.T, what string, err error) {
	t.Helper()
	var pe *pgconn.PgError
	if err != nil && !errors.As(err, &pe) {
		t.Fatalf("%s: %v; want a result or an ErrorResponse", what, err)
	}
}

func selectOne(t *testing.T, ctx context.Context, c *pgconn.PgConn, where string) {
	t.Helper()
	res, err := c.Exec(ctx, "SELECT 1").ReadAll()
	if err != nil || len(res) != 1 || len(res[0].Rows) != 1 || string(res[0].Rows[0][0]) != "1" {
		t.Fatalf("SELECT 1 on %s = %v, %v; want 1", where, res, err)
	}
}
