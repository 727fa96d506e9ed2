package sqlparse

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
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
	if strings.IndexByte(sql, '$') < 0 {
		// No parameter to number after: skip the first pass.
		l = NewLexer("")
	}
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

// ErrRedaction is returned by RedactScanned when PostgreSQL's scanner puts
// a constant or comment where Redact does not see one.
var ErrRedaction = errors.New("redaction disagrees with the PostgreSQL scanner")

// RedactScanned is Redact checked against PostgreSQL's own scanner, for
// text that has no parse tree to check it against (it failed to parse, or
// was refused before parsing): every byte the scanner puts in a string or
// numeric constant or a comment must be in a token Redact replaces or
// drops. The scanner is flex's, not recursive, but a long text's token list
// is large, so it runs where a parse would.
func RedactScanned(ctx context.Context, sql string) (string, error) {
	b, err := call(ctx, opScan, sql)
	if err != nil {
		return "", err
	}
	var res pg_query.ScanResult
	if err := proto.Unmarshal([]byte(b), &res); err != nil {
		return "", fmt.Errorf("decode scan: %w", err)
	}
	kinds := make([]TokenKind, len(sql))
	l := NewLexer(sql)
	for {
		kind, start, end, ok := l.Next()
		if !ok {
			break
		}
		for i := start; i < end; i++ {
			kinds[i] = kind
		}
	}
	for _, tok := range res.Tokens {
		switch tok.Token {
		case pg_query.Token_SCONST, pg_query.Token_USCONST, pg_query.Token_BCONST, pg_query.Token_XCONST,
			pg_query.Token_ICONST, pg_query.Token_FCONST, pg_query.Token_SQL_COMMENT, pg_query.Token_C_COMMENT:
		default:
			continue
		}
		if tok.Start < 0 || int(tok.End) > len(sql) {
			return "", fmt.Errorf("%w: token [%d, %d) outside the text", ErrRedaction, tok.Start, tok.End)
		}
		for i := tok.Start; i < tok.End; i++ {
			switch kinds[i] {
			case String, Number, Space, Comment:
			default:
				return "", fmt.Errorf("%w at byte %d", ErrRedaction, i)
			}
		}
	}
	return Redact(sql), nil
}
