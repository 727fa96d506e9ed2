package sqlparse

import (
	"strconv"
	"strings"
)

// Redact returns sql with every literal token (string constants of every
// form, dollar-quoted strings, numbers) replaced by a parameter $n and
// every comment by a space, numbered after the highest $n the text already
// has, as pg_query's Normalize numbers them. Unlike Normalize it works on
// tokens, not on the tree, so the literals of utility statements (EXECUTE
// p('…'), NOTIFY ch, '…', CREATE ROLE … PASSWORD '…', SET x = '…') are
// replaced too, and it needs no parse. Literal-free text is what the audit
// log may hold; callers cross-check it against the parse tree (PostgreSQL's
// lexer is the authority on where a literal is).
func Redact(sql string) string {
	next := 1
	l := NewLexer(sql)
	for {
		kind, start, end, ok := l.Next()
		if !ok {
			break
		}
		if kind == Param {
			if n, err := strconv.Atoi(sql[start+1 : end]); err == nil && n >= next {
				next = n + 1
			}
		}
	}
	var b strings.Builder
	b.Grow(len(sql))
	l = NewLexer(sql)
	for {
		kind, start, end, ok := l.Next()
		if !ok {
			break
		}
		switch kind {
		case String, Number:
			// Glued to a word or a lone '$' (errors to PostgreSQL
			// anyway), "$1" could read as the end of a dollar-quote tag
			// ("$a" + "$1"); a space keeps it a parameter.
			if s := b.String(); len(s) > 0 && isIdentChar(s[len(s)-1]) {
				b.WriteByte(' ')
			}
			var num [24]byte
			b.Write(strconv.AppendInt(append(num[:0], '$'), int64(next), 10))
			next++
		case Comment:
			b.WriteByte(' ')
		default:
			b.WriteString(sql[start:end])
		}
	}
	return b.String()
}
