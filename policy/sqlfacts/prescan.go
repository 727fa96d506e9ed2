package sqlfacts

import (
	"fmt"
	"unicode/utf8"

	"github.com/egressd/egressd/policy"
)

// Limits bound what is handed to libpg_query. Its C parser recurses once per
// nesting level and once per operator of a left-deep expression; past a few
// thousand levels it runs off the C stack and the whole process dies with
// SIGSEGV, which recover() cannot catch. So the bounds are enforced by a
// cheap Go scan before the parser ever sees the text.
type Limits struct {
	// MaxLen is the longest query text in bytes. If zero, 1 MiB is used.
	MaxLen int
	// MaxDepth is the deepest nesting of parentheses and brackets. If zero,
	// 256 is used.
	MaxDepth int
	// MaxOps is the most operator tokens (symbol runs and operator
	// keywords such as AND, NOT, UNION, CASE) in one query. Measured here,
	// a 5,000-term `1+1+…` already exceeds pg_query's protobuf recursion
	// limit and 10,000 crashes the C parser. If zero, 2,000 is used.
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

// Reasons the pre-scan and parser deny with.
const (
	ReasonTooComplex = "sql_too_complex"
	ReasonParseError = "sql_parse_error"
	ReasonBadUTF8    = "sql_invalid_utf8"
)

func tooComplex(format string, a ...any) error {
	return &policy.DenyError{Reason: ReasonTooComplex, Detail: fmt.Sprintf(format, a...)}
}

// Prescan checks sql against lim without parsing it. It skips string
// literals, quoted identifiers and comments so that their contents neither
// count nor hide structure. A nil error means the parser may be called.
func Prescan(sql string, lim Limits) error {
	lim = lim.withDefaults()
	if len(sql) > lim.MaxLen {
		return tooComplex("query is %d bytes, limit %d", len(sql), lim.MaxLen)
	}
	if !utf8.ValidString(sql) {
		return &policy.DenyError{Reason: ReasonBadUTF8, Detail: "query text is not valid UTF-8"}
	}
	depth, ops := 0, 0
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '(' || c == '[':
			depth++
			if depth > lim.MaxDepth {
				return tooComplex("nesting deeper than %d", lim.MaxDepth)
			}
			i++
		case c == ')' || c == ']':
			if depth > 0 {
				depth--
			}
			i++
		case c == '\'':
			i = skipQuoted(sql, i+1, '\'', isEscapeString(sql, i))
		case c == '"':
			i = skipQuoted(sql, i+1, '"', false)
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			i = skipLine(sql, i)
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			i = skipBlockComment(sql, i)
		case c == '$':
			i = skipDollar(sql, i)
		case isOpChar(c):
			for i < len(sql) && isOpChar(sql[i]) {
				// A comment start inside an operator run ends the run,
				// as it does in PostgreSQL's lexer.
				if i+1 < len(sql) && (sql[i] == '-' && sql[i+1] == '-' || sql[i] == '/' && sql[i+1] == '*') {
					break
				}
				i++
			}
			ops++
		case c == ':':
			// "::" casts nest like an operator; a lone ':' is a slice.
			if i+1 < len(sql) && sql[i+1] == ':' {
				ops++
				i += 2
			} else {
				i++
			}
		case isIdentStart(c):
			j := i + 1
			for j < len(sql) && isIdentChar(sql[j]) {
				j++
			}
			if isOpKeyword(sql[i:j]) {
				ops++
			}
			i = j
		default:
			i++
		}
		if ops > lim.MaxOps {
			return tooComplex("more than %d operators", lim.MaxOps)
		}
	}
	return nil
}

func isOpChar(c byte) bool {
	switch c {
	case '+', '-', '*', '/', '<', '>', '=', '~', '!', '@', '#', '%', '^', '&', '|', '`', '?':
		return true
	}
	return false
}

func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

func isIdentChar(c byte) bool {
	return isIdentStart(c) || c >= '0' && c <= '9' || c == '$'
}

// isEscapeString reports whether the quote at i opens an E'…' string, in
// which a backslash escapes the next character.
func isEscapeString(sql string, i int) bool {
	if i == 0 || sql[i-1] != 'E' && sql[i-1] != 'e' {
		return false
	}
	return i == 1 || !isIdentChar(sql[i-2])
}

// skipQuoted returns the index after the closing quote q (doubled quotes
// escape it), or len(sql) when the literal is unterminated.
func skipQuoted(sql string, i int, q byte, backslash bool) int {
	for i < len(sql) {
		switch sql[i] {
		case '\\':
			if backslash {
				i += 2
				continue
			}
		case q:
			if i+1 < len(sql) && sql[i+1] == q {
				i += 2
				continue
			}
			return i + 1
		}
		i++
	}
	return len(sql)
}

func skipLine(sql string, i int) int {
	for i < len(sql) && sql[i] != '\n' {
		i++
	}
	return i
}

// skipBlockComment skips a /* … */ comment; PostgreSQL nests them.
func skipBlockComment(sql string, i int) int {
	level := 0
	for i < len(sql) {
		switch {
		case sql[i] == '/' && i+1 < len(sql) && sql[i+1] == '*':
			level++
			i += 2
		case sql[i] == '*' && i+1 < len(sql) && sql[i+1] == '/':
			level--
			i += 2
			if level == 0 {
				return i
			}
		default:
			i++
		}
	}
	return len(sql)
}

// skipDollar skips a $tag$…$tag$ string, or a $n parameter.
func skipDollar(sql string, i int) int {
	j := i + 1
	if j < len(sql) && sql[j] >= '0' && sql[j] <= '9' {
		for j < len(sql) && sql[j] >= '0' && sql[j] <= '9' {
			j++
		}
		return j
	}
	for j < len(sql) && sql[j] != '$' && isIdentChar(sql[j]) {
		j++
	}
	if j >= len(sql) || sql[j] != '$' {
		return i + 1
	}
	tag := sql[i : j+1]
	for k := j + 1; k+len(tag) <= len(sql); k++ {
		if sql[k] == '$' && sql[k:k+len(tag)] == tag {
			return k + len(tag)
		}
	}
	return len(sql)
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
