package sqlfacts

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/egressd/egressd/policy/sqlparse"
)

// CountStatements returns how many statements Statements finds in sql,
// without building them.
func CountStatements(sql string) (int, error) {
	toks, err := sqlparse.Scan(sql)
	if err != nil {
		return 0, err
	}
	n := 0
	statements(sql, toks, func([]sqlparse.Token) { n++ })
	return n, nil
}

// Stmt is one statement of a scanned text: its text, from its first token
// to its last, and those tokens (spans in the whole text).
type Stmt struct {
	Text string
	Toks []sqlparse.Token
}

// Statements returns the top-level statements of sql without parsing it,
// given its tokens (sqlparse.Scan's): the text between the `;` tokens of
// PostgreSQL's own scanner, from the first token to the last, each with
// its tokens, and empty statements (only comments) left out. The scan is
// linear and safe in-process, so it can bound a query before the parser
// sees it. A `;` inside a BEGIN ATOMIC function body counts as a
// separator here, so Statements may count more statements than the parser
// does, never fewer.
func Statements(sql string, toks []sqlparse.Token) []Stmt {
	var out []Stmt
	statements(sql, toks, func(st []sqlparse.Token) {
		out = append(out, Stmt{Text: sql[st[0].Start:st[len(st)-1].End], Toks: st})
	})
	return out
}

// statements calls yield with the tokens of every non-empty statement of
// sql, given its tokens.
func statements(sql string, toks []sqlparse.Token, yield func([]sqlparse.Token)) {
	start, nonEmpty := 0, false
	for i, t := range toks {
		switch {
		case t.Kind == sqlparse.Comment:
		case t.Kind == sqlparse.Punct && sql[t.Start] == ';':
			if nonEmpty {
				yield(toks[start:i])
			}
			start, nonEmpty = i+1, false
		default:
			nonEmpty = true
		}
	}
	if nonEmpty {
		yield(toks[start:])
	}
}

// WordsOf returns the words of the statement whose tokens (spans in sql)
// are toks, in order — keywords and identifiers as PostgreSQL's scanner
// and grammar name them: folded to lower case, quoted identifiers
// unquoted, U&"…" escapes decoded, every name truncated to the server's 63
// bytes — skipping literals, numbers, operators and comments. It lets the
// gate name the prepared statement or cursor a PREPARE, EXECUTE, DECLARE
// or FETCH refers to without a parse: a name spelled differently from the
// server's (a 70-byte name the server cut to 63, U&"d\0065l" for del)
// would let a revoked object run.
func WordsOf(sql string, toks []sqlparse.Token) []string {
	var out []string
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch t.Kind {
		case sqlparse.Word:
			out = append(out, truncateIdent(asciiLower(t.Text(sql))))
		case sqlparse.QuotedIdent:
			tok := t.Text(sql)
			if tok[0] != '"' {
				esc, used := uescape(sql, toks[i+1:])
				i += used
				out = append(out, truncateIdent(unicodeIdent(tok[2:], esc)))
				continue
			}
			out = append(out, truncateIdent(unquote(tok)))
		}
	}
	return out
}

// unquote is the name a "quoted" identifier token spells.
func unquote(tok string) string {
	if len(tok) < 2 {
		return tok
	}
	return strings.ReplaceAll(tok[1:len(tok)-1], `""`, `"`)
}

// uescape reads the UESCAPE 'c' clause that may follow a U& identifier,
// given the tokens after it: the escape character (a backslash without
// the clause) and how many tokens the clause took. PostgreSQL refuses a
// malformed clause; esc 0 then names nothing.
func uescape(stmt string, rest []sqlparse.Token) (esc byte, used int) {
	if len(rest) == 0 || rest[0].Kind != sqlparse.Word || !strings.EqualFold(rest[0].Text(stmt), "uescape") {
		return '\\', 0
	}
	if len(rest) > 1 && rest[1].Kind == sqlparse.String {
		if s := rest[1].Text(stmt); len(s) == 3 && s[0] == '\'' {
			return s[1], 2
		}
		return 0, 2
	}
	return 0, 1
}

// unicodeIdent is the name a U&"…" identifier token (without its U&)
// spells with escape character esc: escXXXX and esc+XXXXXX are code
// points, a doubled esc is esc itself. A name spelled with escapes must
// match the plain spelling of the same name, or a revoked prepared
// statement could be run as EXECUTE U&"d\0065l" (or U&"d!0065l" UESCAPE
// '!'). Text it cannot decode (a bad escape, esc 0 for a malformed
// UESCAPE) is kept as written, quotes included, which names nothing the
// session created, and the server refuses it as well.
func unicodeIdent(tok string, esc byte) string {
	in := unquote(tok)
	if esc == 0 {
		return tok
	}
	if strings.IndexByte(in, esc) < 0 {
		return in
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
	return b.String()
}
