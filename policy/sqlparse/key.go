package sqlparse

import "strings"

// Key is the cache key of the text toks were scanned from (Scan's tokens
// of sql): the text with each comment replaced by a space and each
// literal by a NUL byte and the grammar token it is (literalClass), every
// other byte kept. It costs no parse: the gate computes it from the
// tokens its pre-scan already has, where it once ran pg_query's Normalize
// (a parse of its own).
//
// Two texts with one Key scan to the same tokens, literals aside, and
// their literals are the same grammar tokens in the same places: a NUL
// is in no scanned text, so the markers cannot be forged, and the
// grammar chooses productions by token, never by a literal's value. So
// the texts parse to trees of one form that differ only in literal
// values. That is what a verdict shared under the Key needs, provided no
// fact was read from a literal's value: where the tree keeps a literal
// as something other than a constant node (an option value, a type
// modifier, a file name, a utility statement's string), package sqlfacts
// marks the statement Statement.ConstantFacts, and the gate shares no
// such verdict. Unlike Normalize's output, a Key distinguishes 1 from
// '1' and from 99999999999 (a number past int32), and a literal from a
// parameter $n.
func Key(sql string, toks []Token) string {
	if len(toks) == 0 {
		return ""
	}
	var b strings.Builder
	from, to := toks[0].Start, toks[len(toks)-1].End
	b.Grow(to - from)
	prev := from
	for _, t := range toks {
		b.WriteString(sql[prev:t.Start])
		prev = t.End
		switch {
		case t.class != 0:
			b.WriteByte(0)
			b.WriteByte(t.class)
		case t.Kind == Comment:
			b.WriteByte(' ')
		default:
			b.WriteString(sql[t.Start:t.End])
		}
	}
	b.WriteString(sql[prev:to])
	return b.String()
}

// IntegerKey is how Key writes an integer literal: what a text's integer
// tokens become in its Key.
const IntegerKey = "\x00i"
