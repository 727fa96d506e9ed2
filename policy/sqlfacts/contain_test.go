package sqlfacts

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlfacts/internal/jsontree"
	"github.com/egressd/egressd/policy/sqlparse"
	"github.com/egressd/egressd/policy/sqlparse/deepsql"
)

// TestDeepConstructsParsedOrDenied sends every deep construct of the
// grammar, at sizes from the in-process bound up to the 1 MiB limit,
// through the parse the gate uses: each is parsed or denied with a stable
// reason, and the test process survives all of them.
func TestDeepConstructsParsedOrDenied(t *testing.T) {
	ctx := context.Background()
	for _, c := range deepsql.Constructs {
		t.Run(c.Name, func(t *testing.T) {
			for _, n := range []int{3000, 30000, c.MaxN(1 << 20)} {
				sql := c.Text(n)
				_, err := ParseContext(ctx, sql, Options{})
				var de *policy.DenyError
				switch {
				case err == nil:
				case !errors.As(err, &de):
					t.Errorf("%s × %d: %v is not a deny", c.Name, n, err)
				case de.Reason != policy.ReasonSQLParseError && de.Reason != policy.ReasonSQLTooComplex:
					t.Errorf("%s × %d: deny %s; want %s or %s", c.Name, n, de.Reason, policy.ReasonSQLParseError, policy.ReasonSQLTooComplex)
				}
			}
		})
	}
}

// TestDeepTreeDeniedNotWalked: a tree the worker parses but deeper than
// the walker's bound is denied sql_too_complex instead of recursing once
// per level on the goroutine's stack.
func TestDeepTreeDeniedNotWalked(t *testing.T) {
	sql := "SELECT 1" + strings.Repeat(" ISNULL", 12000)
	_, err := ParseContext(context.Background(), sql, Options{})
	var de *policy.DenyError
	if !errors.As(err, &de) || de.Reason != policy.ReasonSQLTooComplex {
		t.Fatalf("Parse(ISNULL × 12,000) = %v; want deny %s", err, policy.ReasonSQLTooComplex)
	}
}

// TestAuditSQLHasNoLiterals: the audit text of every statement kind,
// utility statements included, holds none of its literals.
func TestAuditSQLHasNoLiterals(t *testing.T) {
	tests := []struct{ sql, want string }{
		{"SELECT 'zqa' FROM t WHERE b = 12345 -- zqb", "SELECT $1 FROM t WHERE b = $2"},
		{"EXECUTE p('zqa', 12345)", "EXECUTE p($1, $2)"},
		{"PREPARE p AS SELECT 'zqa'", "PREPARE p AS SELECT $1"},
		{"NOTIFY ch, 'zqa'", "NOTIFY ch, $1"},
		{"CALL f('zqa')", "CALL f($1)"},
		{"COMMENT ON TABLE t IS 'zqa'", "COMMENT ON TABLE t IS $1"},
		{"CREATE SERVER s FOREIGN DATA WRAPPER w OPTIONS (password 'zqa')", "CREATE SERVER s FOREIGN DATA WRAPPER w OPTIONS (password $1)"},
		{"CREATE SUBSCRIPTION s CONNECTION 'host=h password=zqa' PUBLICATION p", "CREATE SUBSCRIPTION s CONNECTION $1 PUBLICATION p"},
		{"CREATE ROLE r PASSWORD 'zqa'", "CREATE ROLE r PASSWORD $1"},
		{"ALTER ROLE r ENCRYPTED PASSWORD 'zqa'", "ALTER ROLE r ENCRYPTED PASSWORD $1"},
		{"SET application_name = 'zqa'", "SET application_name = $1"},
		{"SET search_path = public", "SET search_path = public"},
		{"COPY t TO STDOUT WITH (FORMAT csv)", "COPY t TO STDOUT WITH (FORMAT csv)"},
		{"COPY t FROM '/tmp/zqa'", "COPY t FROM $1"},
		{"SELECT $q$zqa$q$, E'zq\\'a', U&'zqa', B'1011', X'FA', interval '1 zqa' day", "SELECT $1, $2, $3, $4, $5, interval $6 day"},
		{"SELECT -12345, varchar(10) 'zqa'", "SELECT -$1, varchar($2) $3"},
		{"DO $$BEGIN PERFORM 'zqa'; END$$", "DO $1"},
	}
	for _, tt := range tests {
		t.Run(tt.sql, func(t *testing.T) {
			sts, err := Parse(tt.sql, Options{})
			if err != nil || len(sts) != 1 {
				t.Fatalf("Parse = %v, %v; want one statement", sts, err)
			}
			if got := sts[0].AuditSQL; got != tt.want {
				t.Errorf("AuditSQL = %q; want %q", got, tt.want)
			}
		})
	}
}

// TestAuditTextRefusesContradiction: when the scanner's idea of the text and
// the tree disagree (here simulated by checking a tree against other
// text), the audit text is the fixed placeholder, never the text.
func TestAuditTextRefusesContradiction(t *testing.T) {
	tests := []struct{ name, parsed, lexed string }{
		{"constant not on a literal token", "SELECT 'abc'", "SELECT /*abc*/"},
		{"payload left in the text", "NOTIFY ch, 'zqpay'", "NOTIFY ch, zqpay"},
		{"option value left in the text", "CREATE ROLE r PASSWORD 'zqpw'", "CREATE ROLE r PASSWORD zqpw1; SELECT zqpw"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree, err := sqlparse.ParseToJSON(context.Background(), tt.parsed)
			if err != nil {
				t.Fatal(err)
			}
			d := jsontree.Acquire()
			defer d.Release()
			if err := d.Parse(tree); err != nil {
				t.Fatal(err)
			}
			var raw int32 = -1
			if err := d.Items(d.Get(0, keyStmts), func(e int32) error { raw = e; return nil }); err != nil {
				t.Fatal(err)
			}
			toks, err := sqlparse.Scan(tt.lexed)
			if err != nil {
				t.Fatal(err)
			}
			if got, literals := auditText(d, &tokens{src: tt.lexed, toks: toks}, raw, toks); got != RedactionFailed || literals {
				t.Errorf("auditText(tree of %q, text %q) = %q, %v; want %q, false", tt.parsed, tt.lexed, got, literals, RedactionFailed)
			}
		})
	}
}

func TestContainsBounded(t *testing.T) {
	tests := []struct {
		s, v string
		want bool
	}{
		{"NOTIFY ch, $1", "ch", true},
		{"NOTIFY chan, $1", "ch", false},
		{"SELECT $12", "12", false},
		{"a=b c", "=b", true},
		{"xx", "", false},
	}
	for _, tt := range tests {
		if got := containsBounded(tt.s, tt.v); got != tt.want {
			t.Errorf("containsBounded(%q, %q) = %v; want %v", tt.s, tt.v, got, tt.want)
		}
	}
}

func TestAuditSQLPerStatement(t *testing.T) {
	sts, err := Parse("SELECT 'zqa';\n NOTIFY ch, 'zqb'; /* c */ SELECT -5, x FROM t WHERE y = 'zqc'", Options{})
	if err != nil || len(sts) != 3 {
		t.Fatalf("Parse = %v, %v; want three statements", sts, err)
	}
	want := []string{"SELECT $1", "NOTIFY ch, $1", "SELECT -$1, x FROM t WHERE y = $2"}
	for i, st := range sts {
		if st.AuditSQL != want[i] {
			t.Errorf("statement %d AuditSQL = %q; want %q", i, st.AuditSQL, want[i])
		}
	}
}
