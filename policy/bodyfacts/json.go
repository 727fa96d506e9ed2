package bodyfacts

import (
	"fmt"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
)

// MaxDepth is how deeply arrays and objects may nest in a body ParseJSON
// accepts: the parser recurses once per level, so this bounds its stack.
const MaxDepth = 64

// The bounds of a number ParseJSON accepts (RFC 8259 lets a parser set
// them). Rego compares numbers exactly, through math/big: a long mantissa
// costs time quadratic in its length, and an exponent past ±1e6 makes
// OPA's comparison panic ("illegal value"), which would end the process.
// float64 needs 24 bytes and exponents within ±324; these are far wider.
const (
	// MaxNumberLen bounds a number's text in bytes.
	MaxNumberLen = 100
	// MaxExponent bounds the absolute value of a number's written exponent.
	MaxExponent = 1000
)

// ParseJSON parses b, one JSON value (RFC 8259), into the Rego value a
// policy sees as input.body. Numbers keep their literal text (ast.Number),
// never rounded through a float.
//
// It is stricter than the RFC where a looser reading lets a policy and a
// server see different values: it refuses duplicate object keys (compared
// after unescaping, so {"a":1,"\u0061":2} is refused: servers keep the
// first or the last), invalid UTF-8 anywhere and escaped lone surrogates
// (decoders replace them, or not), a byte order mark, and anything after
// the value but whitespace; and where Rego could not bear the value:
// nesting deeper than MaxDepth, a number longer than MaxNumberLen or with
// an exponent beyond ±MaxExponent. Errors wrap ErrUnparseable and name
// the byte offset.
//
// One pass, linear in len(b).
func ParseJSON(b []byte) (ast.Value, error) {
	p := parser{b: b}
	p.space()
	v, err := p.value()
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i != len(p.b) {
		return nil, p.fail("data after the JSON value")
	}
	return v, nil
}

// parser is a recursive-descent JSON parser over b from offset i; depth
// is how many arrays and objects enclose the value being parsed.
type parser struct {
	b     []byte
	i     int
	depth int
	buf   []byte // reused to unescape strings
}

func (p *parser) fail(msg string) error {
	return fmt.Errorf("json at byte %d: %s: %w", p.i, msg, ErrUnparseable)
}

// space skips the four whitespace bytes RFC 8259 allows.
func (p *parser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) value() (ast.Value, error) {
	if p.i >= len(p.b) {
		return nil, p.fail("unexpected end")
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return ast.String(s), nil
	case c == 't':
		return p.literal("true", ast.Boolean(true))
	case c == 'f':
		return p.literal("false", ast.Boolean(false))
	case c == 'n':
		return p.literal("null", ast.Null{})
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	}
	return nil, p.fail(fmt.Sprintf("unexpected byte %q", p.b[p.i]))
}

func (p *parser) literal(word string, v ast.Value) (ast.Value, error) {
	if len(p.b)-p.i < len(word) || string(p.b[p.i:p.i+len(word)]) != word {
		return nil, p.fail("invalid literal")
	}
	p.i += len(word)
	return v, nil
}

// enter and leave bracket a nested array or object.
func (p *parser) enter() error {
	if p.depth++; p.depth > MaxDepth {
		return p.fail(fmt.Sprintf("nested deeper than %d", MaxDepth))
	}
	p.i++
	return nil
}

func (p *parser) array() (ast.Value, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	var elems []*ast.Term
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		p.depth--
		return ast.NewArray(), nil
	}
	for {
		p.space()
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		elems = append(elems, ast.NewTerm(v))
		p.space()
		if p.i >= len(p.b) {
			return nil, p.fail("unterminated array")
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			p.depth--
			return ast.NewArray(elems...), nil
		default:
			return nil, p.fail("expected ',' or ']'")
		}
	}
}

// dupScan is how many keys an object may have before duplicates are
// looked up in a map rather than by scanning the keys so far.
const dupScan = 16

func (p *parser) object() (ast.Value, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	var items [][2]*ast.Term
	var seen map[string]struct{}
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		p.depth--
		return ast.NewObject(), nil
	}
	for {
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return nil, p.fail("expected a string key")
		}
		at := p.i
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		if dup(items, &seen, k) {
			p.i = at
			return nil, p.fail(fmt.Sprintf("duplicate key %q", k))
		}
		p.space()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return nil, p.fail("expected ':'")
		}
		p.i++
		p.space()
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		items = append(items, ast.Item(ast.StringTerm(k), ast.NewTerm(v)))
		p.space()
		if p.i >= len(p.b) {
			return nil, p.fail("unterminated object")
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			p.depth--
			return ast.NewObject(items...), nil
		default:
			return nil, p.fail("expected ',' or '}'")
		}
	}
}

// dup says whether k is among the keys of items, and records it: by
// scanning while the object is small, then in *seen.
func dup(items [][2]*ast.Term, seen *map[string]struct{}, k string) bool {
	if len(items) < dupScan {
		for _, it := range items {
			if string(it[0].Value.(ast.String)) == k {
				return true
			}
		}
		return false
	}
	if *seen == nil {
		*seen = make(map[string]struct{}, 2*dupScan)
		for _, it := range items {
			(*seen)[string(it[0].Value.(ast.String))] = struct{}{}
		}
	}
	if _, ok := (*seen)[k]; ok {
		return true
	}
	(*seen)[k] = struct{}{}
	return false
}

// number scans an RFC 8259 number and keeps its text:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *parser) number() (ast.Value, error) {
	start := p.i
	if p.b[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.b) && p.b[p.i] == '0':
		p.i++
	case p.i < len(p.b) && p.b[p.i] >= '1' && p.b[p.i] <= '9':
		p.digits()
	default:
		return nil, p.fail("invalid number")
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if p.digits() == 0 {
			return nil, p.fail("invalid number: no digit after '.'")
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		at := p.i
		if p.digits() == 0 {
			return nil, p.fail("invalid number: no digit in exponent")
		}
		exp := 0
		for _, c := range p.b[at:p.i] {
			if exp = exp*10 + int(c-'0'); exp > MaxExponent {
				return nil, p.fail(fmt.Sprintf("number exponent beyond ±%d", MaxExponent))
			}
		}
	}
	if p.i-start > MaxNumberLen {
		return nil, p.fail(fmt.Sprintf("number longer than %d bytes", MaxNumberLen))
	}
	return ast.Number(p.b[start:p.i]), nil
}

func (p *parser) digits() int {
	n := 0
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
		n++
	}
	return n
}

// str parses the string at p.i (a '"') and returns it unescaped.
func (p *parser) str() (string, error) {
	p.i++
	start := p.i
	// Fast path: no escape, so the string is the bytes as they are.
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := string(p.b[start:p.i])
			p.i++
			return s, nil
		case c == '\\':
			p.buf = append(p.buf[:0], p.b[start:p.i]...)
			return p.escaped()
		case c < 0x20:
			return "", p.fail("control character in string")
		case c < utf8.RuneSelf:
			p.i++
		default:
			if err := p.utf8(); err != nil {
				return "", err
			}
		}
	}
	return "", p.fail("unterminated string")
}

// utf8 steps over one multi-byte UTF-8 sequence at p.i, refusing an
// invalid one (utf8.DecodeRune refuses overlong forms and surrogates).
func (p *parser) utf8() error {
	r, size := utf8.DecodeRune(p.b[p.i:])
	if r == utf8.RuneError && size == 1 {
		return p.fail("invalid UTF-8")
	}
	p.i += size
	return nil
}

// escaped continues str from the first backslash, unescaping into p.buf.
func (p *parser) escaped() (string, error) {
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return string(p.buf), nil
		case c == '\\':
			if err := p.escape(); err != nil {
				return "", err
			}
		case c < 0x20:
			return "", p.fail("control character in string")
		case c < utf8.RuneSelf:
			p.buf = append(p.buf, c)
			p.i++
		default:
			at := p.i
			if err := p.utf8(); err != nil {
				return "", err
			}
			p.buf = append(p.buf, p.b[at:p.i]...)
		}
	}
	return "", p.fail("unterminated string")
}

// escape unescapes the escape sequence at p.i into p.buf. A \u escape of
// a UTF-16 surrogate must be a high one followed by a low one.
func (p *parser) escape() error {
	if p.i+1 >= len(p.b) {
		return p.fail("unterminated escape")
	}
	var c byte
	switch p.b[p.i+1] {
	case '"', '\\', '/':
		c = p.b[p.i+1]
	case 'b':
		c = '\b'
	case 'f':
		c = '\f'
	case 'n':
		c = '\n'
	case 'r':
		c = '\r'
	case 't':
		c = '\t'
	case 'u':
		return p.unicode()
	default:
		return p.fail("invalid escape")
	}
	p.buf = append(p.buf, c)
	p.i += 2
	return nil
}

func (p *parser) unicode() error {
	r, ok := p.hex4()
	if !ok {
		return p.fail(`invalid \u escape`)
	}
	switch {
	case r >= 0xdc00 && r <= 0xdfff:
		return p.fail("lone low surrogate")
	case r >= 0xd800 && r <= 0xdbff:
		at := p.i
		p.i += 6
		lo, ok := p.hex4()
		if !ok || lo < 0xdc00 || lo > 0xdfff {
			p.i = at
			return p.fail("lone high surrogate")
		}
		r = 0x10000 + (r-0xd800)<<10 + (lo - 0xdc00)
	}
	p.buf = utf8.AppendRune(p.buf, r)
	p.i += 6
	return nil
}

// hex4 reads the 4 hex digits of a \u escape at p.i.
func (p *parser) hex4() (rune, bool) {
	if len(p.b)-p.i < 6 || p.b[p.i] != '\\' || p.b[p.i+1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i+2 : p.i+6] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}
