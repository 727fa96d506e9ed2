package sqlparse

import "testing"

// FuzzRedact: the lexer terminates on any input, Levels never exceeds the
// text's length, and the redacted text, lexed again, holds no literal and
// no comment.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{
		"SELECT 'a', 1.5e-3, $1, $$x$$, E'\\'', U&'\\0041', B'1', X'F'", "/* /* */ */ SELECT -- c\n1",
		"NOTIFY ch, 'p'", "$'a'", "a$'x'", "1'a'b", "$a$ $b$ $a$", "U&\"x\" 'y'", "SELECT .5.5..5",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		if n := Levels(sql); n > len(sql) {
			t.Fatalf("Levels(%q) = %d; more than its %d bytes (InProcess relies on this bound)", sql, n, len(sql))
		}
		red := Redact(sql)
		l := NewLexer(red)
		for {
			kind, start, end, ok := l.Next()
			if !ok {
				break
			}
			if kind == String || kind == Number || kind == Comment {
				t.Fatalf("Redact(%q) = %q holds %q (kind %d)", sql, red, red[start:end], kind)
			}
		}
	})
}
