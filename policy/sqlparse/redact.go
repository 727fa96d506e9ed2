package sqlparse

import (
	"strconv"
	"strings"
)

// Redact returns sql with every literal token of PostgreSQL's scanner
// (string constants of every form, dollar-quoted strings, numbers)
// replaced by a parameter $n and every comment by a space, numbered after
// the highest $n the text already has, as pg_query's Normalize numbers
// them. Unlike Normalize it works on tokens, not on the tree, so the
// literals of utility statements (EXECUTE p('…'), NOTIFY ch, '…', CREATE
// ROLE … PASSWORD '…', SET x = '…') are replaced too. A text the scanner
// refuses has no redaction: its error is returned, and nothing of it may
// be logged.
func Redact(sql string) (string, error) {
	toks, err := Scan(sql)
	if err != nil {
		return "", err
	}
	return RedactTokens(sql, toks), nil
}

// RedactTokens is Redact of the text toks span in sql, from the first
// token to the last: the whole of a scanned text (Scan's tokens), or one
// statement of it, numbered on its own.
func RedactTokens(sql string, toks []Token) string {
	if len(toks) == 0 {
		return ""
	}
	return redactRange(sql, toks, toks[0].Start, toks[len(toks)-1].End)
}

// redactRange redacts sql[from:to], whose tokens are toks.
func redactRange(sql string, toks []Token, from, to int) string {
	next := 1
	for _, t := range toks {
		if t.Kind == Param {
			if n, err := strconv.Atoi(sql[t.Start+1 : t.End]); err == nil && n >= next {
				next = n + 1
			}
		}
	}
	var b strings.Builder
	b.Grow(to - from)
	prev := from
	for _, t := range toks {
		b.WriteString(sql[prev:t.Start])
		prev = t.End
		switch t.Kind {
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
			b.WriteString(sql[t.Start:t.End])
		}
	}
	b.WriteString(sql[prev:to])
	return b.String()
}

func isIdentChar(c byte) bool {
	return c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}
