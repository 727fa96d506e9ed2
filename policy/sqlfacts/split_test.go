package sqlfacts

import (
	"slices"
	"strings"
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v5"
)

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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := slices.Collect(Split(tt.sql))
			if !slices.Equal(got, tt.want) {
				t.Errorf("Split(%q) = %q; want %q", tt.sql, got, tt.want)
			}
			if n := CountStatements(tt.sql, 100); n != len(tt.want) {
				t.Errorf("CountStatements(%q) = %d; want %d", tt.sql, n, len(tt.want))
			}
		})
	}
}

func TestCountStatementsStopsPastMax(t *testing.T) {
	sql := strings.Repeat("SELECT 1;", 100000)
	if n := CountStatements(sql, 100); n != 101 {
		t.Errorf("CountStatements(100000 statements, 100) = %d; want 101", n)
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
		{"unterminated quote", `CLOSE "c`, []string{"close", "c"}},
		{"unicode escapes", `EXECUTE U&"D\0065l\\"(0)`, []string{"execute", `Del\`}},
		{"unicode uescape", `EXECUTE U&"d!0065l!!" UESCAPE '!' (0)`, []string{"execute", "del!"}},
		{"malformed uescape", `EXECUTE U&"d!0065l" UESCAPE 'xy'`, []string{"execute", `"d!0065l"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := slices.Collect(Words(tt.stmt)); !slices.Equal(got, tt.want) {
				t.Errorf("Words(%q) = %q; want %q", tt.stmt, got, tt.want)
			}
			if got := FirstWord(tt.stmt); !strings.EqualFold(got, tt.want[0]) {
				t.Errorf("FirstWord(%q) = %q; want %q in any case", tt.stmt, got, tt.want[0])
			}
		})
	}
}

// FuzzSplit checks Split against the parser: it never finds fewer
// statements than pg_query does, so a cap on its count bounds the parse.
func FuzzSplit(f *testing.F) {
	for _, s := range []string{"SELECT 1; SELECT 2", "SELECT ';'", `SELECT E'\\';'`, "SELECT $a$;$a$", "/* ; */ SELECT 1;;", `SELECT "a;"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		if len(sql) > 4096 || Prescan(sql, Limits{}) != nil {
			return
		}
		n := CountStatements(sql, 1<<20)
		for range Words(sql) {
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
