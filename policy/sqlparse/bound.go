package sqlparse

// Levels is a sound upper bound, up to a constant factor, on how deep
// PostgreSQL's grammar can build a parse tree from the text toks were
// scanned from: the number of tokens that can add a level. Every keyword
// and identifier counts (ISNULL, NATURAL JOIN, COLLATE, AT TIME ZONE, IS
// NOT DISTINCT FROM, function names … each build one more level of a
// left-deep tree, and listing the keywords that do is how the old pre-scan
// missed them), so does every operator character (PostgreSQL splits "+-"
// into two operators), every "::" and every opening bracket. Literals,
// numbers, $n, commas, dots, semicolons and comments cannot add a level on
// their own: each is a leaf or a separator of siblings. Each counted level
// takes at least one byte of the text, so Levels is at most its length.
func Levels(toks []Token) int {
	n := 0
	for _, t := range toks {
		switch t.Kind {
		case Word, QuotedIdent, Cast, Open:
			n++
		case Op:
			n += t.End - t.Start
		}
	}
	return n
}
