package sqlparse

// Levels is a sound upper bound, up to a constant factor, on how deep
// PostgreSQL's grammar can build a parse tree from sql: the number of tokens
// that can add a level. Every keyword and identifier counts (ISNULL,
// NATURAL JOIN, COLLATE, AT TIME ZONE, IS NOT DISTINCT FROM, function names
// … each build one more level of a left-deep tree, and listing the
// keywords that do is how the old pre-scan missed them), so does every
// operator character (PostgreSQL splits "+-" into two operators), every
// "::" and every opening bracket. Literals, numbers, $n, commas, dots,
// semicolons and comments cannot add a level on their own: each is a leaf
// or a separator of siblings. Each counted level takes at least one byte,
// so Levels(sql) <= len(sql).
func Levels(sql string) int {
	l := NewLexer(sql)
	n := 0
	for {
		kind, start, end, ok := l.Next()
		if !ok {
			return n
		}
		switch kind {
		case Word, QuotedIdent, Cast, Open:
			n++
		case Op:
			n += end - start
		}
	}
}
