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
	toks, err := sqlparse.Scan(stmt)
	if err != nil {
		// The statement parsed, so it scans; were it not so, assume the
		// file name that needs a check.
		return true
	}
	depth, seen := 0, false
	for _, t := range toks {
		switch t.Kind {
		case sqlparse.Comment:
			continue
		case sqlparse.Open:
			depth++
		case sqlparse.Close:
			depth--
		}
		if seen {
			return t.Kind == sqlparse.String
		}
		if depth == 0 && t.Kind == sqlparse.Word && (strings.EqualFold(t.Text(stmt), "to") || strings.EqualFold(t.Text(stmt), "from")) {
			seen = true
		}
	}
	return false
}
