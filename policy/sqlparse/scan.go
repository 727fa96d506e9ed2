package sqlparse

import (
	"errors"
	"fmt"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"github.com/pganalyze/pg_query_go/v5/parser"
	"google.golang.org/protobuf/encoding/protowire"
)

// TokenKind classifies a token of PostgreSQL's scanner as far as the
// bounds, the statement split and the redaction need: what is a literal,
// what is a comment, what can add a level to the parse tree.
type TokenKind uint8

const (
	// Comment is a -- line comment or a (nested) /* */ block comment.
	Comment TokenKind = iota + 1
	// Word is a keyword or an unquoted identifier.
	Word
	// QuotedIdent is a "quoted" or U&"quoted" identifier.
	QuotedIdent
	// String is a string constant: '…', E'…', B'…', X'…', U&'…' or a
	// $tag$…$tag$ dollar-quoted string, with its continuations.
	String
	// Number is a numeric constant.
	Number
	// Param is a positional parameter $n.
	Param
	// Op is an operator: a run of operator characters, or one of + - * /
	// % ^ < > = and the two-character comparisons.
	Op
	// Cast is "::".
	Cast
	// Open is "(" or "[".
	Open
	// Close is ")" or "]".
	Close
	// Punct is any other token: , ; . : .. $ and what PostgreSQL's
	// grammar would reject.
	Punct
)

// Token is one token of the text: its kind and byte span [Start, End).
type Token struct {
	Kind TokenKind
	// class is the grammar's token of a String or Number (see
	// literalClass), 0 for any other kind.
	class      byte
	Start, End int
}

// Text is the token's text in sql, the text it was scanned from.
func (t Token) Text(sql string) string { return sql[t.Start:t.End] }

// ErrScan is wrapped by the error of a text PostgreSQL's scanner refuses
// (an unterminated literal or comment, trailing junk after a number, a
// bad escape) or whose token spans egressd cannot account for.
var ErrScan = errors.New("query text does not scan")

// Scan returns the tokens of sql as PostgreSQL's own scanner (libpg_query's
// copy of scan.l, with standard_conforming_strings on, as the gate keeps
// every session) splits it, whitespace left out. Every lexing decision of
// egressd — the statement split, the bounds, the depth estimate, the names
// a statement creates, the redaction — is made on these tokens and on
// nothing else: a second lexer that disagreed with the server's (a lone CR
// ending a -- comment, a string continued on the next line) is where the
// last reviews found literals in the audit log and statements the gate
// never saw.
//
// The scanner is a flex automaton with no recursion, so it runs
// in-process on any text, in time and memory linear in its length. Its
// token ends are recomputed where libpg_query does not track them (U&
// strings and identifiers end at the next token), and the bytes between
// tokens are checked to be whitespace: a text whose spans do not account
// for every byte is refused rather than guessed at.
func Scan(sql string) ([]Token, error) {
	if strings.IndexByte(sql, 0) >= 0 {
		// The C scanner would stop at the NUL and never see the rest.
		return nil, fmt.Errorf("%w: a NUL byte in the text", ErrScan)
	}
	b, err := parser.ScanToProtobuf(sql)
	if err != nil {
		var pe *parser.Error
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("%w: %w", ErrScan, &Error{Message: pe.Message, Cursorpos: pe.Cursorpos})
		}
		return nil, fmt.Errorf("%w: %w", ErrScan, err)
	}
	return decodeScan(sql, b)
}

// Field numbers of pg_query's ScanResult and ScanToken messages.
const (
	fieldTokens     = 2 // ScanResult.tokens
	fieldTokenStart = 1 // ScanToken.start
	fieldTokenEnd   = 2 // ScanToken.end
	fieldTokenToken = 4 // ScanToken.token
)

// decodeScan reads the scanner's protobuf result straight from the wire
// (a text's tokens would otherwise be one allocated message each) and
// turns it into spans that cover sql.
func decodeScan(sql string, b []byte) ([]Token, error) {
	// One allocation, not a doubling chain: every token takes a byte of
	// sql and at least four of b (a message's tag and length, and its
	// end and token fields, which are never zero).
	raw := make([]rawToken, 0, min(len(sql), len(b)/4)+1)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("decode scan: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if num == fieldTokens && typ == protowire.BytesType {
			msg, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, fmt.Errorf("decode scan token: %w", protowire.ParseError(n))
			}
			t, err := decodeToken(msg)
			if err != nil {
				return nil, err
			}
			raw = append(raw, t)
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return nil, fmt.Errorf("decode scan: %w", protowire.ParseError(n))
		}
		b = b[n:]
	}
	return spans(sql, raw)
}

// rawToken is a token as libpg_query reports it.
type rawToken struct {
	start, end int
	tok        pg_query.Token
}

func decodeToken(b []byte) (rawToken, error) {
	var t rawToken
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return t, fmt.Errorf("decode scan token: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if typ != protowire.VarintType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return t, fmt.Errorf("decode scan token: %w", protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return t, fmt.Errorf("decode scan token: %w", protowire.ParseError(n))
		}
		b = b[n:]
		switch num {
		case fieldTokenStart:
			t.start = int(int32(v))
		case fieldTokenEnd:
			t.end = int(int32(v))
		case fieldTokenToken:
			t.tok = pg_query.Token(int32(v))
		}
	}
	return t, nil
}

// spans turns the scanner's tokens into Tokens covering sql: in order, not
// overlapping, with only PostgreSQL's whitespace between them.
// libpg_query's start is the scanner's own location; its end is exact for
// one-piece tokens and for the multi-piece ones it tracks (strings,
// quoted identifiers, block comments), but for U&'…' and U&"…" it is the
// length of the last piece: those end where the next token starts, less
// the whitespace before it (both end with a quote, never with a space).
func spans(sql string, raw []rawToken) ([]Token, error) {
	out := make([]Token, len(raw))
	prev := 0
	for i, r := range raw {
		next := len(sql)
		if i+1 < len(raw) {
			next = raw[i+1].start
		}
		end := r.end
		if r.tok == pg_query.Token_USCONST || r.tok == pg_query.Token_UIDENT {
			end = next
			for end > r.start && isSpace(sql[end-1]) {
				end--
			}
		}
		if r.start < prev || end <= r.start || end > next {
			return nil, fmt.Errorf("%w: token %v at [%d, %d) does not fit between %d and %d", ErrScan, r.tok, r.start, end, prev, next)
		}
		for j := prev; j < r.start; j++ {
			if !isSpace(sql[j]) {
				return nil, fmt.Errorf("%w: byte %d is in no token", ErrScan, j)
			}
		}
		out[i] = Token{Kind: kindOf(r.tok, sql[r.start]), class: literalClass(r.tok), Start: r.start, End: end}
		prev = end
	}
	for j := prev; j < len(sql); j++ {
		if !isSpace(sql[j]) {
			return nil, fmt.Errorf("%w: byte %d is in no token", ErrScan, j)
		}
	}
	return out, nil
}

// isSpace is PostgreSQL's scanner_isspace: the whitespace of scan.l.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'
}

// literalClass is the token PostgreSQL's grammar sees for a literal, as
// one byte: 's' a string (U&'…' reaches the grammar as one), 'b' a bit
// string, 'x' a hex string, 'i' an integer, 'f' any other number (an
// integer past int32 included: the scanner decides by value). 0 for a
// token that is not a literal.
func literalClass(tok pg_query.Token) byte {
	switch tok {
	case pg_query.Token_SCONST, pg_query.Token_USCONST:
		return 's'
	case pg_query.Token_BCONST:
		return 'b'
	case pg_query.Token_XCONST:
		return 'x'
	case pg_query.Token_ICONST:
		return 'i'
	case pg_query.Token_FCONST:
		return 'f'
	}
	return 0
}

// kindOf maps a scanner token to its kind; first is its first byte.
func kindOf(tok pg_query.Token, first byte) TokenKind {
	switch tok {
	case pg_query.Token_SQL_COMMENT, pg_query.Token_C_COMMENT:
		return Comment
	case pg_query.Token_IDENT:
		if first == '"' {
			return QuotedIdent
		}
		return Word
	case pg_query.Token_UIDENT:
		return QuotedIdent
	case pg_query.Token_SCONST, pg_query.Token_USCONST, pg_query.Token_BCONST, pg_query.Token_XCONST:
		return String
	case pg_query.Token_ICONST, pg_query.Token_FCONST:
		return Number
	case pg_query.Token_PARAM:
		return Param
	case pg_query.Token_Op, pg_query.Token_LESS_EQUALS, pg_query.Token_GREATER_EQUALS, pg_query.Token_NOT_EQUALS,
		pg_query.Token_EQUALS_GREATER, pg_query.Token_COLON_EQUALS,
		pg_query.Token_ASCII_37, pg_query.Token_ASCII_42, pg_query.Token_ASCII_43, pg_query.Token_ASCII_45,
		pg_query.Token_ASCII_47, pg_query.Token_ASCII_60, pg_query.Token_ASCII_61, pg_query.Token_ASCII_62,
		pg_query.Token_ASCII_94:
		return Op
	case pg_query.Token_TYPECAST:
		return Cast
	case pg_query.Token_ASCII_40, pg_query.Token_ASCII_91:
		return Open
	case pg_query.Token_ASCII_41, pg_query.Token_ASCII_93:
		return Close
	}
	if tok > pg_query.Token_C_COMMENT {
		// Every token after the comments is a keyword.
		return Word
	}
	return Punct
}
