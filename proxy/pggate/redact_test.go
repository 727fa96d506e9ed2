package pggate

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/egressd/egressd/internal/pgtest"
)

// literalTemplates put a marker literal into every statement kind the
// audit log records, utility statements included: %[1]s is a string
// marker (letters), %[2]d a numeric one.
var literalTemplates = []string{
	"SELECT '%[1]s', %[2]d FROM users WHERE name = '%[1]s'",
	"SELECT * FROM users WHERE id = %[2]d OR name LIKE '%%%[1]s%%'",
	"INSERT INTO items VALUES (%[2]d, '%[1]s')",
	"UPDATE items SET note = '%[1]s' WHERE id = %[2]d",
	"DELETE FROM items WHERE note = E'%[1]s\\''",
	"SELECT $q$%[1]s$q$, $$%[1]s$$, U&'%[1]s', B'%[2]b', X'%[2]x'",
	"SELECT interval '%[2]d %[1]s', '%[1]s'::text, CAST('%[1]s' AS varchar(%[2]d))",
	"PREPARE p AS SELECT '%[1]s'",
	"EXECUTE p('%[1]s', %[2]d)",
	"NOTIFY ch, '%[1]s'",
	"CALL proc('%[1]s', %[2]d)",
	"COMMENT ON TABLE users IS '%[1]s'",
	"CREATE SERVER s FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '%[1]s', password '%[1]s')",
	"CREATE USER MAPPING FOR CURRENT_USER SERVER s OPTIONS (user 'u', password '%[1]s')",
	"CREATE SUBSCRIPTION sub CONNECTION 'host=h password=%[1]s' PUBLICATION p",
	"CREATE ROLE r PASSWORD '%[1]s'",
	"ALTER ROLE agent ENCRYPTED PASSWORD '%[1]s' VALID UNTIL '%[2]d-01-01'",
	"SET application_name = '%[1]s'",
	"SET statement_timeout = %[2]d",
	"COPY items FROM '/tmp/%[1]s'",
	"DO $$BEGIN RAISE NOTICE '%[1]s'; END$$",
	"SELECT 1 /* %[1]s */ -- %[1]s",
	"SELECT '%[1]s'; SELECT %[2]d; NOTIFY ch, '%[1]s'",
	"SELECT pg_sleep(%[2]d), lower('%[1]s')",
	"SELECT '%[1]s' ISNULL",
	// Refused before the policy: a syntax error, too many operators, a
	// parse in a worker that the walker's depth bound refuses.
	"SELEC '%[1]s', %[2]d",
	"SELECT '%[1]s'" + strings.Repeat("+%[2]d", 2100),
	"SELECT '%[1]s', %[2]d" + strings.Repeat(" ISNULL", 12000),
}

// TestAuditHoldsNoLiterals sends a generated corpus (random marker literals
// in every statement kind, through the simple and the extended protocol)
// through a real gate session and requires that no marker appears in any
// audit record or in the gate's operational log.
func TestAuditHoldsNoLiterals(t *testing.T) {
	pg := sharedPG(t)
	core, logs := observer.New(zapcore.DebugLevel)
	f := startGateLog(t, pg, zap.New(core))
	c := connect(t, f.dsn("agent-rw", passRW, "app"))
	rng := rand.New(rand.NewPCG(1, 2))
	var markers []string
	for round := range 3 {
		for i, tmpl := range literalTemplates {
			var word [12]byte
			for j := range word {
				word[j] = byte('a' + rng.IntN(26))
			}
			s, n := "zq"+string(word[:]), 100000000+rng.IntN(900000000)
			markers = append(markers, s, fmt.Sprint(n))
			sql := fmt.Sprintf(tmpl, s, n)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			if (round+i)%2 == 0 {
				// Allowed or denied, the log is what is checked below.
				_, _ = c.Exec(ctx, sql).ReadAll()
			} else {
				_, _ = c.Prepare(ctx, "", sql, nil)
				_, _ = c.Exec(ctx, "SELECT 1").ReadAll()
			}
			cancel()
		}
	}
	recs := f.audit.Records()
	if len(recs) < len(literalTemplates)*3 {
		t.Fatalf("%d audit records; want at least %d", len(recs), len(literalTemplates)*3)
	}
	// The refused texts are recorded too, redacted.
	refused := map[string]bool{}
	for _, r := range recs {
		if r.Reason == "sql_parse_error" || r.Reason == "sql_too_complex" {
			refused[r.Reason+" "+r.SQL[:min(len(r.SQL), 12)]] = true
		}
	}
	for _, want := range []string{"sql_parse_error SELEC $1, $2", "sql_too_complex SELECT $1+$2", "sql_too_complex SELECT $1, $"} {
		if !refused[want] {
			t.Errorf("no refused record %q among %v", want, refused)
		}
	}
	for _, r := range recs {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range markers {
			if strings.Contains(string(b), m) {
				t.Errorf("audit record holds literal %q: %s", m, b)
			}
		}
	}
	for _, e := range logs.All() {
		b, err := json.Marshal(append([]zap.Field{zap.String("msg", e.Message)}, e.Context...))
		if err != nil {
			t.Fatal(err)
		}
		line := fmt.Sprintf("%s %v", b, e.ContextMap())
		for _, m := range markers {
			if strings.Contains(line, m) {
				t.Errorf("log line holds literal %q: %s", m, line)
			}
		}
	}
}

// startGateLog is startGate with the given operational logger.
func startGateLog(t testing.TB, srv *pgtest.Server, log *zap.Logger) *fixture {
	t.Helper()
	return startGateWith(t, srv, nil, nil, log)
}

// TestAuditSQLFitsARecord: the redacted text of a 1 MiB query is up to four
// times as long, and the audit writer refuses a record past 128 KiB (and
// then denies audit_unavailable), so the SQL is cut, at a character.
func TestAuditSQLFitsARecord(t *testing.T) {
	tests := []struct {
		name string
		sql  string
		want int
	}{
		{"short", "SELECT $1", len("SELECT $1")},
		{"long", "SELECT $1" + strings.Repeat(", $1", 1<<18), maxAuditSQL + len("…")},
		{"cut inside a character", "a" + strings.Repeat("é", maxAuditSQL), maxAuditSQL - 1 + len("…")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := auditSQL(tt.sql)
			if len(got) != tt.want || !utf8.ValidString(got) || !strings.HasPrefix(tt.sql, strings.TrimSuffix(got, "…")) {
				t.Errorf("auditSQL(%d bytes) = %d bytes (valid UTF-8: %v); want %d, a prefix", len(tt.sql), len(got), utf8.ValidString(got), tt.want)
			}
		})
	}
}
