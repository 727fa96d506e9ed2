package pggate

import (
	"slices"
	"strconv"
	"strings"

	"github.com/egressd/egressd/policy/sqlparse"
)

// shapeOf computes, without cgo, the normalized form of the queries
// pgbench and most ORMs send with inline integers: text with each integer
// literal token replaced by $1, $2, … in order. ok is false for any text
// outside a deliberately small lexical subset, where a Go scanner could
// disagree with PostgreSQL's. The shape is appended to buf[:0].
//
// Why a cache keyed by the shape is sound: the subset has no quotes,
// dollar quoting, comments or backslashes, so its tokens are identifiers,
// keywords, operators, punctuation and numbers. A digit run bounded on
// both sides by something other than [A-Za-z0-9_.] is one decimal integer
// token, so two texts of one shape differ only in the digits of integer
// tokens at the same places, which parse to the same tree up to constant
// values (or fail to parse, upstream too). No fact is read from an integer
// value except EXPLAIN's ANALYZE option, so EXPLAIN is refused here, and
// those of statements marked sqlfacts.Statement.ConstantFacts (a SET
// value, a literal the tree does not keep as a constant), whose verdicts
// the gate never stores under a shape. The gate stores a verdict under a
// shape only when the text's sqlparse.Key, from PostgreSQL's scanner,
// agrees (shapeMatches). The shape is a cache key only: a hit's audit SQL is
// redacted from the text itself, by PostgreSQL's scanner (forText).
func shapeOf(text string, buf []byte) (shape []byte, ok bool) {
	if len(text) > 4096 {
		return nil, false
	}
	out := buf[:0]
	n := 0
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c >= '0' && c <= '9':
			j := i
			for j < len(text) && text[j] >= '0' && text[j] <= '9' {
				j++
			}
			if (i > 0 && isWordOrDot(text[i-1])) || (j < len(text) && isWordOrDot(text[j])) {
				out = append(out, text[i:j]...)
			} else {
				n++
				out = append(out, '$')
				out = strconv.AppendInt(out, int64(n), 10)
			}
			i = j
			continue
		case c == '-' && i+1 < len(text) && text[i+1] == '-':
			return nil, false // a comment
		case c == 'e' || c == 'E':
			if hasFoldPrefix(text[i:], "explain") {
				return nil, false
			}
		case isWordOrDot(c), shapePunct[c]:
		default:
			return nil, false
		}
		out = append(out, c)
		i++
	}
	return out, true
}

// shapePunct are the other bytes the subset allows: whitespace, operators
// that cannot start a comment, and punctuation.
var shapePunct = func() (t [256]bool) {
	for _, c := range []byte(" \t\r\n,();:=<>+-*%[]") {
		t[c] = true
	}
	return t
}()

func isWordOrDot(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.'
}

// hasFoldPrefix reports whether s starts with the lower-case ASCII word w,
// ignoring case.
func hasFoldPrefix(s, w string) bool {
	if len(s) < len(w) {
		return false
	}
	for i := 0; i < len(w); i++ {
		if s[i]|0x20 != w[i] {
			return false
		}
	}
	return true
}

// shapeMatches reports whether key, sqlparse.Key of a text, agrees with
// that text's shape: PostgreSQL's scanner found an integer literal
// (sqlparse.IntegerKey) at each $n of the shape and no other literal, and
// every other byte is the same (the Key leaves out the whitespace before
// the first token and after the last). Texts of this shape then differ
// only in the digits of those integer tokens, each a constant of the tree
// wherever the verdict may be shared (sqlfacts.Statement.ConstantFacts).
// A digit run the scanner takes for another kind of number (one past
// int32) has another marker: that text stores nothing under its shape.
func shapeMatches(shape, key string) bool {
	shape = strings.Trim(shape, " \t\r\n")
	for i := 0; i < len(shape); i++ {
		if shape[i] != '$' {
			if key == "" || key[0] != shape[i] {
				return false
			}
			key = key[1:]
			continue
		}
		for i+1 < len(shape) && shape[i+1] >= '0' && shape[i+1] <= '9' {
			i++
		}
		var ok bool
		if key, ok = strings.CutPrefix(key, sqlparse.IntegerKey); !ok {
			return false
		}
	}
	return key == ""
}

// forShape is v, a verdict cached under shape, made the verdict of a text
// of that shape without a scan: its audit SQL is the shape itself, cut into
// statements at its `;` and numbered from $1 in each, as PostgreSQL's
// scanner would redact the text. The shape is the text with each integer
// token replaced, and a verdict is cached under it only when it is what
// the Key of the text that filled it agrees with (shapeMatches), so
// it holds no literal: it is this text's own redaction, not another's. A
// verdict whose statements create or drop named objects, or whose
// statements do not line up with the shape's, is left to forText (nil).
func forShape(v *verdict, shape string) *verdict {
	if len(v.effects) > 0 {
		return nil
	}
	out := *v
	out.stmts = slices.Clone(v.stmts)
	n, params := 0, 0
	for part := range strings.SplitSeq(shape, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if n == len(out.stmts) {
			return nil
		}
		out.stmts[n].sql = auditSQL(renumber(part, params))
		params += strings.Count(part, "$")
		n++
	}
	if n != len(out.stmts) {
		return nil
	}
	return &out
}

// renumber numbers the $n of one statement of a shape from $1, in order,
// given how many the shape's earlier statements took (a shape numbers them
// across the whole text; the only '$' of a shape are its own).
func renumber(stmt string, before int) string {
	if before == 0 {
		return stmt
	}
	var b strings.Builder
	b.Grow(len(stmt))
	n := 0
	for i := 0; i < len(stmt); i++ {
		if stmt[i] != '$' {
			b.WriteByte(stmt[i])
			continue
		}
		for i+1 < len(stmt) && stmt[i+1] >= '0' && stmt[i+1] <= '9' {
			i++
		}
		n++
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}
