package sqlparse

import (
	"context"
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v5"
)

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

// FuzzLexerMatchesPostgres checks the lexer against PostgreSQL's own
// scanner (pg_query.Scan, called directly: the scanner does not recurse):
// every byte PostgreSQL puts in a string or numeric constant, or in a
// comment, is in a token Redact replaces or drops (or in whitespace
// between the parts of a continued string). A byte of a constant that the
// lexer takes for a word or an operator would reach the audit log.
func FuzzLexerMatchesPostgres(f *testing.F) {
	for _, s := range []string{
		"SELECT 'a', 1.5e-3, $1, $$x$$, E'\\'', U&'\\0041' UESCAPE '!', B'1', X'F', N'n'", "/* /* */ */ SELECT -- c\n1",
		"SELECT 'a'\n'b'", "SELECT 0x1F, 0o17, 0b1, 1_000, .5, 5.", "SELECT $a$ $b$ $a$", "SELECT a$$b$$", "SELECT 1::int--x",
		"SELECT e'\\\\' 'x'", "SELECT 'it''s'", "SELECT x'1'", `SELECT U&"a" 'b'`, "SELECT */* x */ 1", "NOTIFY ch, 'p'",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		if _, err := pg_query.Scan(sql); err != nil {
			return
		}
		if _, err := RedactScanned(context.Background(), sql); err != nil {
			t.Fatalf("RedactScanned(%q) = %v", sql, err)
		}
	})
}
