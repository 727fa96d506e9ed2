package sqlfacts

import (
	"strings"

	"github.com/egressd/egressd/policy/sqlparse"
)

// copiesToString reports whether the COPY statement text names a file by a
// string after its TO or FROM. The parse tree cannot say so for an empty
// name: pg_query writes a NULL file name (STDIN/STDOUT) and an empty
// string alike as an absent field, yet COPY t TO an empty string asks the
// server for a file. The
// direction keyword is the first TO or FROM outside brackets (the query,
// the column list and the options are all inside brackets, and the old
// option syntax has neither word), and what follows it is STDIN, STDOUT,
// PROGRAM or the file name's string.
func copiesToString(stmt string) bool {
	lx := sqlparse.NewLexer(stmt)
	depth, seen := 0, false
	for {
		kind, from, to, ok := lx.Next()
		if !ok {
			return false
		}
		switch kind {
		case sqlparse.Space, sqlparse.Comment:
			continue
		case sqlparse.Open:
			depth++
		case sqlparse.Close:
			depth--
		}
		if seen {
			return kind == sqlparse.String
		}
		if depth == 0 && kind == sqlparse.Word && (strings.EqualFold(stmt[from:to], "to") || strings.EqualFold(stmt[from:to], "from")) {
			seen = true
		}
	}
}
