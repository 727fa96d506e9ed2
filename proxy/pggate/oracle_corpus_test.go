package pggate

import (
	"go/scanner"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v5"
)

// oracleCorpusFiles are the Go tests whose SQL string literals TestOracle
// runs: the corpora the facts were written against.
var oracleCorpusFiles = []string{
	"*_test.go",
	"../../policy/sqlfacts/*_test.go",
	"../../cmd/egressd/check_sql_test.go",
	"../../e2e/pggate_test.go",
}

// sqlStarts are the first words that make a string literal a statement.
var sqlStarts = []string{"SELECT", "INSERT", "UPDATE", "DELETE", "WITH", "COPY", "MERGE", "EXPLAIN", "VALUES", "TABLE", "LOCK", "SET", "SHOW", "RESET", "CALL", "DO ", "NOTIFY"}

// oracleCorpus is testdata/oracle/corpus.sql, then every distinct SQL
// string literal of oracleCorpusFiles that pg_query parses and that is not
// meant to be too large to parse, in file order.
func oracleCorpus(t *testing.T) []string {
	t.Helper()
	var out []string
	seen := map[string]bool{}
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	b, err := os.ReadFile("testdata/oracle/corpus.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "--") {
			add(line)
		}
	}
	for _, pat := range oracleCorpusFiles {
		files, err := filepath.Glob(pat)
		if err != nil || len(files) == 0 {
			t.Fatalf("oracle corpus: no files match %s (%v)", pat, err)
		}
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			fs := token.NewFileSet()
			var sc scanner.Scanner
			sc.Init(fs.AddFile(f, -1, len(src)), src, nil, 0)
			for {
				_, tok, lit := sc.Scan()
				if tok == token.EOF {
					break
				}
				if tok != token.STRING {
					continue
				}
				s, err := strconv.Unquote(lit)
				if err != nil || len(s) > 4096 {
					continue
				}
				s = strings.TrimSpace(s)
				upper := strings.ToUpper(s)
				isSQL := false
				for _, w := range sqlStarts {
					isSQL = isSQL || strings.HasPrefix(upper, w)
				}
				if isSQL {
					if _, err := pg_query.Parse(s); err == nil {
						add(s)
					}
				}
			}
		}
	}
	return out
}
