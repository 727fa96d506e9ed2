package sqlfacts

import (
	"iter"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/egressd/egressd/policy/sqlparse"
)

// Split yields the top-level statements of sql without parsing it: the
// text between semicolons outside string literals, quoted identifiers,
// dollar quotes and comments, trimmed, with empty statements (only
// whitespace and comments) left out. It looks at each byte once, so it can
// bound a query before the parser sees it. A `;` inside a BEGIN ATOMIC
// function body counts as a separator here, so Split may count more
// statements than the parser does, never fewer.
func Split(sql string) iter.Seq[string] {
	return func(yield func(string) bool) {
		start, nonEmpty := 0, false
		lx := sqlparse.NewLexer(sql)
		for {
			kind, from, to, ok := lx.Next()
			if !ok {
				break
			}
			switch {
			case kind == sqlparse.Space || kind == sqlparse.Comment:
			case kind == sqlparse.Punct && sql[from] == ';':
				if nonEmpty && !yield(strings.TrimSpace(sql[start:from])) {
					return
				}
				start, nonEmpty = to, false
			default:
				nonEmpty = true
			}
		}
		if nonEmpty {
			yield(strings.TrimSpace(sql[start:]))
		}
	}
}

// CountStatements returns how many statements Split yields, counting no
// further than max+1 so that the work past the limit is not spent.
func CountStatements(sql string, max int) int {
	n := 0
	for range Split(sql) {
		n++
		if n > max {
			break
		}
	}
	return n
}

// Words yields the words of one statement in order — keywords and
// identifiers folded to lower case as PostgreSQL folds them, quoted
// identifiers unquoted — skipping literals, numbers, operators and
// comments. It lets the gate name the prepared statement or cursor a
// PREPARE, EXECUTE, DECLARE or FETCH refers to without a parse.
func Words(stmt string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for i := 0; ; {
			w, quoted, next := nextWord(stmt, i)
			if next < 0 {
				return
			}
			if quoted {
				w = strings.ReplaceAll(w, `""`, `"`)
			} else {
				w = asciiLower(w)
			}
			if !yield(w) {
				return
			}
			i = next
		}
	}
}

// FirstWord is the first of Words as written (not folded, quotes kept
// doubled), or "": a check of a statement's verb that costs no allocation.
func FirstWord(stmt string) string {
	w, _, _ := nextWord(stmt, 0)
	return w
}

// nextWord finds the word at or after i: its text (inside the quotes for a
// quoted identifier, U& escapes decoded), whether it was quoted, and where
// scanning goes on; next is -1 when there is none.
func nextWord(stmt string, i int) (w string, quoted bool, next int) {
	lx := sqlparse.NewLexer(stmt[i:])
	for {
		kind, from, to, ok := lx.Next()
		if !ok {
			return "", false, -1
		}
		switch kind {
		case sqlparse.Word:
			return stmt[i+from : i+to], false, i + to
		case sqlparse.QuotedIdent:
			tok := stmt[i+from : i+to]
			if tok[0] == 'u' || tok[0] == 'U' {
				esc, end := uescape(stmt, i+to)
				return unicodeIdent(tok[2:], esc), true, end
			}
			return unquote(tok), true, i + to
		}
	}
}

// unquote is the inside of a "quoted" identifier token; an unterminated
// one runs to the end.
func unquote(tok string) string {
	tok = tok[1:]
	if n := len(tok); n > 0 && tok[n-1] == '"' {
		tok = tok[:n-1]
	}
	return tok
}

// uescape reads the UESCAPE 'c' clause that may follow a U& identifier
// ending at i: the escape character (a backslash without the clause) and
// where scanning goes on.
func uescape(stmt string, i int) (esc byte, next int) {
	lx := sqlparse.NewLexer(stmt[i:])
	want := sqlparse.Word
	for {
		kind, from, to, ok := lx.Next()
		switch {
		case !ok:
			return '\\', i
		case kind == sqlparse.Space || kind == sqlparse.Comment:
			continue
		case want == sqlparse.Word && kind == sqlparse.Word && strings.EqualFold(stmt[i+from:i+to], "uescape"):
			want = sqlparse.String
			continue
		case want == sqlparse.String && kind == sqlparse.String && to-from == 3 && stmt[i+from] == '\'':
			return stmt[i+from+1], i + to
		case want == sqlparse.String:
			// PostgreSQL refuses a malformed clause: no name at all.
			return 0, i + to
		}
		return '\\', i
	}
}

// unicodeIdent is the name a U&"…" identifier token (without its U&)
// spells with escape character esc: escXXXX and esc+XXXXXX are code
// points, a doubled esc is esc itself. A name spelled with escapes must
// match the plain spelling of the same name, or a revoked prepared
// statement could be run as EXECUTE U&"d\0065l" (or U&"d!0065l" UESCAPE
// '!'). Text it cannot decode (a bad escape, esc 0 for a malformed UESCAPE)
// is kept as written, which names nothing the session created, and the
// server refuses it as well.
func unicodeIdent(tok string, esc byte) string {
	in := strings.ReplaceAll(unquote(tok), `""`, `"`)
	if esc == 0 {
		return tok
	}
	if strings.IndexByte(in, esc) < 0 {
		return strings.ReplaceAll(in, `"`, `""`)
	}
	var b strings.Builder
	for j := 0; j < len(in); {
		if in[j] != esc {
			b.WriteByte(in[j])
			j++
			continue
		}
		n, skip := 4, 1
		switch {
		case j+1 < len(in) && in[j+1] == esc:
			b.WriteByte(esc)
			j += 2
			continue
		case j+1 < len(in) && in[j+1] == '+':
			n, skip = 6, 2
		}
		if j+skip+n > len(in) {
			return tok
		}
		r, err := strconv.ParseUint(in[j+skip:j+skip+n], 16, 32)
		if err != nil || !utf8.ValidRune(rune(r)) {
			return tok
		}
		b.WriteRune(rune(r))
		j += skip + n
	}
	return strings.ReplaceAll(b.String(), `"`, `""`)
}
