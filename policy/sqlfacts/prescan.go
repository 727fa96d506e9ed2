package sqlfacts

import (
	"fmt"
	"unicode/utf8"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlparse"
)

// Limits bound what is handed to libpg_query. They are cheap outer denies
// checked before any parse; they do not make parsing safe on their own.
// libpg_query recurses in C once per level of the tree and dies with
// SIGSEGV past a few ten thousand levels, and more productions build
// levels than any list of operators names (ISNULL, NATURAL JOIN, COLLATE,
// …). Safety comes from package sqlparse, which parses in-process only the
// texts it proves shallow and everything else in a contained worker whose
// crash denies one statement (sql_parse_error, "parser crashed").
type Limits struct {
	// MaxLen is the longest query text in bytes. If zero, 1 MiB is used.
	MaxLen int
	// MaxDepth is the deepest nesting of parentheses and brackets. If zero,
	// 256 is used.
	MaxDepth int
	// MaxOps is the most operator tokens (symbol runs and operator
	// keywords such as AND, NOT, UNION, CASE) in one query. If zero, 2,000
	// is used.
	MaxOps int
}

func (l Limits) withDefaults() Limits {
	if l.MaxLen == 0 {
		l.MaxLen = 1 << 20
	}
	if l.MaxDepth == 0 {
		l.MaxDepth = 256
	}
	if l.MaxOps == 0 {
		l.MaxOps = 2000
	}
	return l
}

func tooComplex(format string, a ...any) error {
	return &policy.DenyError{Reason: policy.ReasonSQLTooComplex, Detail: fmt.Sprintf(format, a...)}
}

// Prescan checks sql against lim without parsing it, on the tokens of
// PostgreSQL's own scanner: string literals, quoted identifiers and
// comments neither count nor hide structure, exactly where the server
// says they begin and end. A text the scanner refuses is refused here
// (sql_parse_error), as the server would. A nil error means the text may
// be given to package sqlparse (which still decides where it is parsed).
func Prescan(sql string, lim Limits) error {
	_, err := PrescanTokens(sql, lim)
	return err
}

// PrescanTokens is Prescan, returning the text's tokens for the caller's
// further use (a scan is a cgo call with a fixed cost: scan once).
func PrescanTokens(sql string, lim Limits) ([]sqlparse.Token, error) {
	lim = lim.withDefaults()
	if len(sql) > lim.MaxLen {
		return nil, tooComplex("query is %d bytes, limit %d", len(sql), lim.MaxLen)
	}
	if !utf8.ValidString(sql) {
		return nil, &policy.DenyError{Reason: policy.ReasonSQLInvalidUTF8, Detail: "query text is not valid UTF-8"}
	}
	toks, err := sqlparse.Scan(sql)
	if err != nil {
		return nil, &policy.DenyError{Reason: policy.ReasonSQLParseError, Err: err}
	}
	depth, ops := 0, 0
	for _, t := range toks {
		switch t.Kind {
		case sqlparse.Open:
			depth++
			if depth > lim.MaxDepth {
				return nil, tooComplex("nesting deeper than %d", lim.MaxDepth)
			}
		case sqlparse.Close:
			if depth > 0 {
				depth--
			}
		case sqlparse.Op, sqlparse.Cast:
			ops++
		case sqlparse.Word:
			if isOpKeyword(t.Text(sql)) {
				ops++
			}
		}
		if ops > lim.MaxOps {
			return nil, tooComplex("more than %d operators", lim.MaxOps)
		}
	}
	return toks, nil
}

// opKeywords are the keywords that build expression or set-operation trees
// one level per occurrence.
var opKeywords = map[string]bool{
	"and": true, "or": true, "not": true, "union": true, "except": true,
	"intersect": true, "is": true, "like": true, "ilike": true, "similar": true,
	"between": true, "case": true, "when": true, "collate": true, "at": true,
	"in": true, "any": true, "all": true, "some": true, "overlaps": true,
	"array": true, "row": true, "exists": true,
}

func isOpKeyword(w string) bool {
	if len(w) < 2 || len(w) > 9 {
		return false
	}
	var buf [9]byte
	for i := 0; i < len(w); i++ {
		c := w[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return opKeywords[string(buf[:len(w)])]
}
