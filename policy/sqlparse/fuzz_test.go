package sqlparse

import (
	"errors"
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v5"
)

var fuzzSeeds = []string{
	"SELECT 'a', 1.5e-3, $1, $$x$$, E'\\'', U&'\\0041' UESCAPE '!', B'1', X'F', N'n'", "/* /* */ */ SELECT -- c\n1",
	"SELECT 'a'\n'b'", "SELECT 0x1F, 0o17, 0b1, 1_000, .5, 5.", "SELECT $a$ $b$ $a$", "SELECT a$$b$$", "SELECT 1::int--x",
	"SELECT e'\\\\' 'x'", "SELECT 'it''s'", "SELECT x'1'", `SELECT U&"a" 'b'`, "SELECT */* x */ 1", "NOTIFY ch, 'p'",
	"SELECT 1 --x\r, 2", "SELECT E'x'\n'\\' secret '", "SELECT 'a'\r'b'", `SELECT U&"d\0065l"   UESCAPE '!'`, "U&'x'",
	"$'a'", "a$'x'", "1'a'b", "SELECT .5.5..5", "a := 1 => 2 .. 3", "SELECT 1\f+\t2\v",
	// The old Go lexer disagreed with PostgreSQL on these (issue 22).
	"0_0..", "..0.",
}

// FuzzScan checks Scan against PostgreSQL's scanner as pg_query's own
// decoder reports it, in both directions: every token of pg_query.Scan is
// a token of Scan with the same start and the same literal/comment class,
// and the reverse; every byte outside the tokens is whitespace; Levels
// never exceeds the text's length (InProcess relies on it); Key marks
// each literal with the grammar token PostgreSQL's scanner reports for it;
// and the redacted text scans again with no literal and no comment left.
func FuzzScan(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		toks, err := Scan(sql)
		ref, refErr := pg_query.Scan(sql)
		if err != nil {
			if !errors.Is(err, ErrScan) {
				t.Fatalf("Scan(%q) = %v; want an ErrScan", sql, err)
			}
			if refErr == nil && len(ref.Tokens) > 0 && !hasNUL(sql) {
				t.Fatalf("Scan(%q) = %v; PostgreSQL's scanner accepts it", sql, err)
			}
			return
		}
		if refErr != nil {
			t.Fatalf("Scan(%q) = %d tokens; PostgreSQL's scanner refuses it: %v", sql, len(toks), refErr)
		}
		if len(toks) != len(ref.Tokens) {
			t.Fatalf("Scan(%q) = %d tokens; PostgreSQL's scanner has %d", sql, len(toks), len(ref.Tokens))
		}
		prev := 0
		for i, r := range ref.Tokens {
			got := toks[i]
			if got.Start != int(r.Start) || got.End <= got.Start || got.Start < prev {
				t.Fatalf("Scan(%q) token %d = [%d, %d); PostgreSQL's starts at %d (%v)", sql, i, got.Start, got.End, r.Start, r.Token)
			}
			if literalOrComment(r.Token) != (got.Kind == String || got.Kind == Number || got.Kind == Comment) {
				t.Fatalf("Scan(%q) token %d %q has kind %d; PostgreSQL's is %v", sql, i, got.Text(sql), got.Kind, r.Token)
			}
			for j := prev; j < got.Start; j++ {
				if !isSpace(sql[j]) {
					t.Fatalf("Scan(%q): byte %d (%q) is in no token", sql, j, sql[j])
				}
			}
			prev = got.End
		}
		if want := refKey(sql, toks, ref.Tokens); Key(sql, toks) != want {
			t.Fatalf("Key(%q) = %q; want %q (from PostgreSQL's tokens)", sql, Key(sql, toks), want)
		}
		if n := Levels(toks); n > len(sql) {
			t.Fatalf("Levels(%q) = %d; more than its %d bytes", sql, n, len(sql))
		}
		red := RedactTokens(sql, toks)
		again, err := Scan(red)
		if err != nil {
			t.Fatalf("Redact(%q) = %q, which does not scan: %v", sql, red, err)
		}
		for _, tok := range again {
			if tok.Kind == String || tok.Kind == Number || tok.Kind == Comment {
				t.Fatalf("Redact(%q) = %q holds %q (kind %d)", sql, red, tok.Text(red), tok.Kind)
			}
		}
	})
}

func literalOrComment(tok pg_query.Token) bool {
	switch tok {
	case pg_query.Token_SCONST, pg_query.Token_USCONST, pg_query.Token_BCONST, pg_query.Token_XCONST,
		pg_query.Token_ICONST, pg_query.Token_FCONST, pg_query.Token_SQL_COMMENT, pg_query.Token_C_COMMENT:
		return true
	}
	return false
}

func hasNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

// refKey is Key built from PostgreSQL's scanner's own token types (ref)
// over Scan's spans (toks, already checked to start where ref's do).
func refKey(sql string, toks []Token, ref []*pg_query.ScanToken) string {
	if len(toks) == 0 {
		return ""
	}
	classes := map[pg_query.Token]string{
		pg_query.Token_SCONST: "s", pg_query.Token_USCONST: "s", pg_query.Token_BCONST: "b",
		pg_query.Token_XCONST: "x", pg_query.Token_ICONST: "i", pg_query.Token_FCONST: "f",
	}
	var b []byte
	prev := toks[0].Start
	for i, tok := range toks {
		b = append(b, sql[prev:tok.Start]...)
		prev = tok.End
		if c, ok := classes[ref[i].Token]; ok {
			b = append(b, 0, c[0])
		} else if ref[i].Token == pg_query.Token_SQL_COMMENT || ref[i].Token == pg_query.Token_C_COMMENT {
			b = append(b, ' ')
		} else {
			b = append(b, sql[tok.Start:tok.End]...)
		}
	}
	return string(b)
}
