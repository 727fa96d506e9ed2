package sqlfacts

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/egressd/egressd/policy/sqlparse"
	pg_query "github.com/pganalyze/pg_query_go/v5"
)

// split is the statements' texts of sql.
func split(sql string) ([]string, error) {
	toks, err := sqlparse.Scan(sql)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, st := range Statements(sql, toks) {
		out = append(out, st.Text)
	}
	return out, nil
}

// words is WordsOf one statement's text.
func words(stmt string) ([]string, error) {
	toks, err := sqlparse.Scan(stmt)
	if err != nil {
		return nil, err
	}
	return WordsOf(stmt, toks), nil
}

func TestSplit(t *testing.T) {
	tests := []struct {
		name, sql string
		want      []string
	}{
		{"one", "SELECT 1", []string{"SELECT 1"}},
		{"trailing semicolon", "SELECT 1;", []string{"SELECT 1"}},
		{"two", "SELECT 1; DELETE FROM t", []string{"SELECT 1", "DELETE FROM t"}},
		{"empty statements", " ; ;SELECT 1;; -- c\n ; /* x; */ ;", []string{"SELECT 1"}},
		{"semicolon in string", "SELECT ';'; SELECT 2", []string{"SELECT ';'", "SELECT 2"}},
		{"escape string", `SELECT E'\';'; SELECT 2`, []string{`SELECT E'\';'`, "SELECT 2"}},
		{"doubled quote", "SELECT 'a'';'", []string{"SELECT 'a'';'"}},
		{"quoted identifier", `SELECT 1 AS "a;b"`, []string{`SELECT 1 AS "a;b"`}},
		{"dollar quote", "SELECT $f$;$f$; SELECT $$;$$", []string{"SELECT $f$;$f$", "SELECT $$;$$"}},
		{"dollar in identifier", "SELECT a$b$; SELECT 2", []string{"SELECT a$b$", "SELECT 2"}},
		{"nested comment", "SELECT /* /* ; */ ; */ 1", []string{"SELECT /* /* ; */ ; */ 1"}},
		{"line comment", "SELECT 1 -- ;\n", []string{"SELECT 1 -- ;"}},
		{"only comments", "-- x\n/* y */", nil},
		// PostgreSQL ends a -- comment at a lone CR: the statement after
		// it is one the gate must see (the old Go lexer hid it).
		{"comment ends at CR", "SELECT 1 --x\r; EXECUTE del(0)", []string{"SELECT 1 --x", "EXECUTE del(0)"}},
		{"string continued on the next line", "SELECT E'x'\n'\\'; SELECT 2'", []string{"SELECT E'x'\n'\\'; SELECT 2'"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := split(tt.sql)
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("Statements(%q) = %q, %v; want %q", tt.sql, got, err, tt.want)
			}
			if n, err := CountStatements(tt.sql); err != nil || n != len(tt.want) {
				t.Errorf("CountStatements(%q) = %d, %v; want %d", tt.sql, n, err, len(tt.want))
			}
		})
	}
}

func TestCountStatementsRefusesWhatDoesNotScan(t *testing.T) {
	for _, sql := range []string{"SELECT 'a; SELECT 2", "SELECT 1; /* open"} {
		if got, err := CountStatements(sql); err == nil {
			t.Errorf("CountStatements(%q) = %d; want the scanner's error", sql, got)
		}
	}
}

func TestWords(t *testing.T) {
	tests := []struct {
		name, stmt string
		want       []string
	}{
		{"execute", "EXECUTE Del(0, 'x')", []string{"execute", "del"}},
		{"quoted", `PREPARE "My""Stmt" AS SELECT 1`, []string{"prepare", `My"Stmt`, "as", "select"}},
		{"fetch", "FETCH ABSOLUTE -1 FROM c1 -- comment", []string{"fetch", "absolute", "from", "c1"}},
		{"ascii fold only", "DECLARE ÄB CURSOR FOR SELECT 1", []string{"declare", "Äb", "cursor", "for", "select"}},
		{"literals skipped", "SELECT 'execute x', $$prepare$$, 1.5e3", []string{"select"}},
		{"names truncated to 63 bytes", "EXECUTE " + strings.Repeat("d", 70) + "(0)", []string{"execute", strings.Repeat("d", 63)}},
		{"quoted names truncated at a character", `DECLARE "` + strings.Repeat("a", 62) + `é" CURSOR FOR SELECT 1`, []string{"declare", strings.Repeat("a", 62), "cursor", "for", "select"}},
		{"keyword after a comment ending at CR", "SELECT 1 --x\rEXECUTE", []string{"select", "execute"}},
		{"unicode escapes", `EXECUTE U&"D\0065l\\"(0)`, []string{"execute", `Del\`}},
		{"unicode uescape", `EXECUTE U&"d!0065l!!" UESCAPE '!' (0)`, []string{"execute", "del!"}},
		{"malformed uescape", `EXECUTE U&"d!0065l" UESCAPE 'xy'`, []string{"execute", `"d!0065l"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := words(tt.stmt); err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("WordsOf(%q) = %q, %v; want %q", tt.stmt, got, err, tt.want)
			}
		})
	}
}

// FuzzSplit checks CountStatements against the parser: it never finds fewer
// statements than pg_query does, so a cap on its count bounds the parse.
func FuzzSplit(f *testing.F) {
	for _, s := range []string{"SELECT 1; SELECT 2", "SELECT ';'", `SELECT E'\\';'`, "SELECT $a$;$a$", "/* ; */ SELECT 1;;", `SELECT "a;"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		if len(sql) > 4096 || Prescan(sql, Limits{}) != nil {
			return
		}
		n, err := CountStatements(sql)
		if err != nil {
			t.Fatalf("CountStatements(%q) = %v; Prescan accepted it", sql, err)
		}
		if _, err := words(sql); err != nil {
			t.Fatalf("WordsOf(%q) = %v; Prescan accepted it", sql, err)
		}
		res, err := pg_query.Parse(sql)
		if err != nil {
			return
		}
		if len(res.Stmts) > n {
			t.Fatalf("CountStatements(%q) = %d; pg_query parses %d statements", sql, n, len(res.Stmts))
		}
	})
}

// TestAmbiguousStatementsParseTheTextOnce is the reported amplification:
// each EXPLAIN (ANALYZE 0) or SET x = 0, whose JSON is ambiguous, parsed
// the whole text again (a 103 KB query took 51.7 s). The protobuf tree is
// now parsed at most once per text.
func TestAmbiguousStatementsParseTheTextOnce(t *testing.T) {
	calls := 0
	parseProto = func(ctx context.Context, sql string) (*pg_query.ParseResult, error) {
		calls++
		return sqlparse.Parse(ctx, sql)
	}
	defer func() { parseProto = sqlparse.Parse }()
	sql := strings.Repeat("EXPLAIN (ANALYZE 0) SELECT 1; SET work_mem = 0; ", 50)
	sts, err := ParseContext(context.Background(), sql, Options{})
	if err != nil || len(sts) != 100 {
		t.Fatalf("ParseContext(50 × EXPLAIN (ANALYZE 0); SET work_mem = 0) = %d statements, %v; want 100", len(sts), err)
	}
	if calls != 1 {
		t.Errorf("the protobuf tree was parsed %d times for one text; want 1", calls)
	}
}
