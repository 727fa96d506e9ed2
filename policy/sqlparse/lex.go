package sqlparse

// TokenKind classifies a token of SQL text the way PostgreSQL's lexer (with
// standard_conforming_strings on) splits it, as far as the bound and the
// redaction need: what is a literal, what is a comment, what can add a
// level to the parse tree.
type TokenKind uint8

const (
	// Space is whitespace.
	Space TokenKind = iota
	// Comment is a -- line comment or a (nested) /* */ block comment.
	Comment
	// Word is a keyword or an unquoted identifier.
	Word
	// QuotedIdent is a "quoted" or U&"quoted" identifier.
	QuotedIdent
	// String is a string constant: '…', E'…', N'…', B'…', X'…', U&'…' or
	// a $tag$…$tag$ dollar-quoted string.
	String
	// Number is a numeric constant (integer, decimal, exponent, 0x/0o/0b,
	// with _ separators).
	Number
	// Param is a positional parameter $n.
	Param
	// Op is a run of operator characters.
	Op
	// Cast is "::".
	Cast
	// Open is "(" or "[".
	Open
	// Close is ")" or "]".
	Close
	// Punct is any other byte: , ; . : and what PostgreSQL would reject.
	Punct
)

// Lexer splits SQL text into tokens in one pass; every token is at least
// one byte long, so a scan is linear in the text.
type Lexer struct {
	src string
	pos int
}

// NewLexer returns a lexer positioned at the start of src.
func NewLexer(src string) Lexer { return Lexer{src: src} }

// Next returns the next token's kind and its byte span [start, end); ok is
// false at the end of the text.
func (l *Lexer) Next() (kind TokenKind, start, end int, ok bool) {
	s, i := l.src, l.pos
	if i >= len(s) {
		return 0, i, i, false
	}
	start = i
	c := s[i]
	switch {
	case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		kind = Space
	case c == '-' && i+1 < len(s) && s[i+1] == '-':
		for i < len(s) && s[i] != '\n' {
			i++
		}
		kind = Comment
	case c == '/' && i+1 < len(s) && s[i+1] == '*':
		i, kind = skipBlockComment(s, i), Comment
	case c == '\'':
		i, kind = skipQuoted(s, i+1, '\'', false), String
	case c == '"':
		i, kind = skipQuoted(s, i+1, '"', false), QuotedIdent
	case (c == 'u' || c == 'U') && i+2 < len(s) && s[i+1] == '&' && (s[i+2] == '\'' || s[i+2] == '"'):
		// U&'…' and U&"…": backslash starts a Unicode escape but a
		// quote is still only ended by a quote (doubled to escape).
		q := s[i+2]
		i = skipQuoted(s, i+3, q, false)
		kind = String
		if q == '"' {
			kind = QuotedIdent
		}
	case isPrefixQuote(s, i):
		// E'…' (backslash escapes), N'…', B'…', X'…'.
		e := c == 'e' || c == 'E'
		i, kind = skipQuoted(s, i+2, '\'', e), String
	case c == '$':
		i, kind = lexDollar(s, i)
	case c >= '0' && c <= '9' || c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
		i, kind = lexNumber(s, i), Number
	case isIdentStart(c):
		i++
		for i < len(s) && isIdentChar(s[i]) {
			i++
		}
		kind = Word
	case isOpChar(c):
		for i < len(s) && isOpChar(s[i]) {
			// A comment start inside an operator run ends the run, as
			// it does in PostgreSQL's lexer.
			if i > start && i+1 < len(s) && (s[i] == '-' && s[i+1] == '-' || s[i] == '/' && s[i+1] == '*') {
				break
			}
			i++
		}
		kind = Op
	case c == ':' && i+1 < len(s) && s[i+1] == ':':
		i, kind = i+2, Cast
	case c == '(' || c == '[':
		i, kind = i+1, Open
	case c == ')' || c == ']':
		i, kind = i+1, Close
	default:
		i, kind = i+1, Punct
	}
	l.pos = i
	return kind, start, i, true
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func isOpChar(c byte) bool {
	switch c {
	case '+', '-', '*', '/', '<', '>', '=', '~', '!', '@', '#', '%', '^', '&', '|', '`', '?':
		return true
	}
	return false
}

func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

func isIdentChar(c byte) bool {
	return isIdentStart(c) || c >= '0' && c <= '9' || c == '$'
}

// isPrefixQuote reports whether s[i] is one of the letters E, N, B, X
// directly followed by a quote and not itself the tail of an identifier
// (the lexer only gets here at the start of a token).
func isPrefixQuote(s string, i int) bool {
	if i+1 >= len(s) || s[i+1] != '\'' {
		return false
	}
	switch s[i] {
	case 'e', 'E', 'n', 'N', 'b', 'B', 'x', 'X':
		return true
	}
	return false
}

// skipQuoted returns the index after the closing quote q (doubled quotes
// escape it), or len(s) when the literal is unterminated.
func skipQuoted(s string, i int, q byte, backslash bool) int {
	for i < len(s) {
		switch s[i] {
		case '\\':
			if backslash {
				i += 2
				continue
			}
		case q:
			if i+1 < len(s) && s[i+1] == q {
				i += 2
				continue
			}
			return i + 1
		}
		i++
	}
	return len(s)
}

// skipBlockComment skips a /* … */ comment; PostgreSQL nests them.
func skipBlockComment(s string, i int) int {
	level := 0
	for i < len(s) {
		switch {
		case s[i] == '/' && i+1 < len(s) && s[i+1] == '*':
			level++
			i += 2
		case s[i] == '*' && i+1 < len(s) && s[i+1] == '/':
			level--
			i += 2
			if level == 0 {
				return i
			}
		default:
			i++
		}
	}
	return len(s)
}

// lexDollar lexes a $n parameter or a $tag$…$tag$ string starting at the
// '$' at i. A lone '$' is punctuation (PostgreSQL rejects it).
func lexDollar(s string, i int) (int, TokenKind) {
	j := i + 1
	if j < len(s) && s[j] >= '0' && s[j] <= '9' {
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		return j, Param
	}
	for j < len(s) && s[j] != '$' && isIdentChar(s[j]) {
		j++
	}
	if j >= len(s) || s[j] != '$' {
		return i + 1, Punct
	}
	tag := s[i : j+1]
	// strings.Index would do, but this keeps the scan visibly linear:
	// each k is examined once, with a comparison bounded by len(tag)
	// only where a '$' starts it.
	for k := j + 1; k+len(tag) <= len(s); k++ {
		if s[k] == '$' && s[k:k+len(tag)] == tag {
			return k + len(tag), String
		}
	}
	return len(s), String
}

// lexNumber lexes a numeric constant at i, and any identifier characters
// glued to it (PostgreSQL rejects "123abc" as trailing junk; taking them
// into the number keeps a glued word from being mistaken for a separate
// identifier in the redacted text).
func lexNumber(s string, i int) int {
	for i < len(s) {
		c := s[i]
		switch {
		case c >= '0' && c <= '9', c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
			// An exponent's sign belongs to the number.
			if (c == 'e' || c == 'E') && i+1 < len(s) && (s[i+1] == '+' || s[i+1] == '-') && i+2 < len(s) && s[i+2] >= '0' && s[i+2] <= '9' {
				i += 2
				continue
			}
			i++
		case c == '.':
			// "1..2" is a number and a range operator nowhere in
			// PostgreSQL, but 1.2 and 1. are numbers; a second dot ends it.
			if i+1 < len(s) && s[i+1] == '.' {
				return i
			}
			i++
		default:
			return i
		}
	}
	return i
}
