package sqlfacts

import (
	"iter"
	"strings"
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
		for i := 0; i < len(sql); {
			c := sql[i]
			switch {
			case c == ';':
				if nonEmpty && !yield(strings.TrimSpace(sql[start:i])) {
					return
				}
				i++
				start, nonEmpty = i, false
				continue
			case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
				i++
				continue
			case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
				i = skipLine(sql, i)
				continue
			case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
				i = skipBlockComment(sql, i)
				continue
			case c == '\'':
				i = skipQuoted(sql, i+1, '\'', isEscapeString(sql, i))
			case c == '"':
				i = skipQuoted(sql, i+1, '"', false)
			case c == '$':
				i = skipDollar(sql, i)
			case isIdentStart(c):
				// Whole identifiers, so a '$' inside one (a$b$) never
				// opens a dollar quote.
				for i++; i < len(sql) && isIdentChar(sql[i]); i++ {
				}
			default:
				i++
			}
			nonEmpty = true
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
				w = foldIdent(w)
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
// quoted identifier), whether it was quoted, and where scanning goes on;
// next is -1 when there is none.
func nextWord(stmt string, i int) (w string, quoted bool, next int) {
	for i < len(stmt) {
		c := stmt[i]
		switch {
		case c == '-' && i+1 < len(stmt) && stmt[i+1] == '-':
			i = skipLine(stmt, i)
		case c == '/' && i+1 < len(stmt) && stmt[i+1] == '*':
			i = skipBlockComment(stmt, i)
		case c == '\'':
			i = skipQuoted(stmt, i+1, '\'', isEscapeString(stmt, i))
		case c == '"':
			j := skipQuoted(stmt, i+1, '"', false)
			end := j - 1
			if end <= i || stmt[end] != '"' {
				end = j
			}
			return stmt[i+1 : end], true, j
		case c == '$':
			i = skipDollar(stmt, i)
		case c >= '0' && c <= '9':
			for i++; i < len(stmt) && (isIdentChar(stmt[i]) || stmt[i] == '.'); i++ {
			}
		case isIdentStart(c):
			j := i + 1
			for j < len(stmt) && isIdentChar(stmt[j]) {
				j++
			}
			return stmt[i:j], false, j
		default:
			i++
		}
	}
	return "", false, -1
}

// foldIdent lower-cases ASCII letters only, as PostgreSQL folds unquoted
// identifiers in UTF-8: folding more would merge names the server keeps
// apart.
func foldIdent(w string) string {
	for i := 0; i < len(w); i++ {
		if c := w[i]; c >= 'A' && c <= 'Z' {
			b := []byte(w)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return w
}
