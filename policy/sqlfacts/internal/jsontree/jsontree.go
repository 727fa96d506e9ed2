// Package jsontree parses a JSON document into a flat arena of values, for
// reading pg_query's JSON parse trees without allocating per value. It is
// a package of its own, without cgo, so that its fuzz target runs at full
// speed: in sqlfacts, which links pg_query, Go's fuzzing engine stalls.
package jsontree

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// Doc is a parsed JSON document: every value in a flat arena, in
// document order, named by its index (the root is 0; -1 stands for an
// absent value and every accessor accepts it). A container's members
// follow it and Next is the index just past its last descendant, so
// siblings are reached by jumping from one Next to the following one and
// nothing is allocated per value. An object's members are key, value
// pairs (the key is a String):
//
//	for k := obj + 1; k < d.Next(obj); k = d.Next(k + 1) { key, value := d.Raw(k), k+1 }
//
// The parser is iterative with an explicit stack rather than recursive, so
// it has no depth limit of its own: sqlfacts' pre-scan bounds what
// pg_query may nest, and a parse tree near those bounds is thousands of
// levels deep, beyond the depth limits of common JSON libraries.
type Doc struct {
	src   string
	vals  []val
	stack []int32
}

// Kind is the type of a value.
type Kind uint8

const (
	Null Kind = iota
	False
	True
	Number
	String
	Object
	Array
)

// val is one value. For a string, [off, end) is its raw text between
// the quotes and esc says it holds a backslash escape; for a number or a
// literal, the token itself.
type val struct {
	kind     Kind
	esc      bool
	off, end int32
	next     int32
}

// ErrSyntax is wrapped by every error of Parse and Int.
var ErrSyntax = errors.New("malformed parse tree JSON")

func syntaxErr(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrSyntax}, a...)...)
}

// pool recycles arenas: a parse tree of a typical query is a few
// hundred values, and the gate parses on every uncached query.
var pool = sync.Pool{New: func() any { return new(Doc) }}

// Acquire returns an empty document from a pool; Release returns it.
func Acquire() *Doc { return pool.Get().(*Doc) }

// Release drops the document's text and returns its arena to the pool.
// Strings taken from the document stay valid (they are Go strings).
func (d *Doc) Release() {
	d.src = ""
	// A huge tree's arena is not worth keeping for the next small one.
	if cap(d.vals) > 1<<16 {
		d.vals, d.stack = nil, nil
	}
	pool.Put(d)
}

// Parse parses src into d; the root is d.vals[0].
func (d *Doc) Parse(src string) error {
	if len(src) >= math.MaxInt32 {
		return syntaxErr("document is %d bytes", len(src))
	}
	d.src, d.vals, d.stack = src, d.vals[:0], d.stack[:0]
	i := skipSpace(src, 0)
	for {
		// A value starts at i.
		if i >= len(src) {
			return syntaxErr("unexpected end of input")
		}
		switch c := src[i]; c {
		case '{', '[':
			kind, closer := Object, byte('}')
			if c == '[' {
				kind, closer = Array, ']'
			}
			d.stack = append(d.stack, int32(len(d.vals)))
			d.vals = append(d.vals, val{kind: kind, off: int32(i)})
			i = skipSpace(src, i+1)
			if i < len(src) && src[i] == closer {
				i++
				d.close()
				break
			}
			if kind == Object {
				var err error
				if i, err = d.key(i); err != nil {
					return err
				}
			}
			continue
		case '"':
			end, esc, err := scanString(src, i)
			if err != nil {
				return err
			}
			d.scalar(String, esc, i+1, end-1)
			i = end
		case 't':
			if !strings.HasPrefix(src[i:], "true") {
				return syntaxErr("bad literal at %d", i)
			}
			d.scalar(True, false, i, i+4)
			i += 4
		case 'f':
			if !strings.HasPrefix(src[i:], "false") {
				return syntaxErr("bad literal at %d", i)
			}
			d.scalar(False, false, i, i+5)
			i += 5
		case 'n':
			if !strings.HasPrefix(src[i:], "null") {
				return syntaxErr("bad literal at %d", i)
			}
			d.scalar(Null, false, i, i+4)
			i += 4
		default:
			end, err := scanNumber(src, i)
			if err != nil {
				return err
			}
			d.scalar(Number, false, i, end)
			i = end
		}
		// A value ended at i: close containers until one continues.
		for {
			i = skipSpace(src, i)
			if len(d.stack) == 0 {
				if i != len(src) {
					return syntaxErr("trailing data at %d", i)
				}
				return nil
			}
			if i >= len(src) {
				return syntaxErr("unexpected end of input")
			}
			top := d.vals[d.stack[len(d.stack)-1]].kind
			c := src[i]
			if c == ',' {
				i = skipSpace(src, i+1)
				if top == Object {
					var err error
					if i, err = d.key(i); err != nil {
						return err
					}
				}
				break
			}
			if top == Object && c == '}' || top == Array && c == ']' {
				i++
				d.close()
				continue
			}
			return syntaxErr("unexpected %q at %d", c, i)
		}
	}
}

func (d *Doc) scalar(kind Kind, esc bool, off, end int) {
	d.vals = append(d.vals, val{kind: kind, esc: esc, off: int32(off), end: int32(end), next: int32(len(d.vals) + 1)})
}

func (d *Doc) close() {
	top := d.stack[len(d.stack)-1]
	d.stack = d.stack[:len(d.stack)-1]
	d.vals[top].next = int32(len(d.vals))
}

// key parses an object key and its colon at i, leaving i at the value.
func (d *Doc) key(i int) (int, error) {
	if i >= len(d.src) || d.src[i] != '"' {
		return 0, syntaxErr("expected a key at %d", i)
	}
	end, esc, err := scanString(d.src, i)
	if err != nil {
		return 0, err
	}
	d.scalar(String, esc, i+1, end-1)
	i = skipSpace(d.src, end)
	if i >= len(d.src) || d.src[i] != ':' {
		return 0, syntaxErr("expected ':' at %d", i)
	}
	return skipSpace(d.src, i+1), nil
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// scanString checks the string starting with the quote at i and returns
// the index after its closing quote and whether it holds an escape.
func scanString(s string, i int) (int, bool, error) {
	esc := false
	for i++; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return i + 1, esc, nil
		case c == '\\':
			esc = true
			if i+1 >= len(s) {
				return 0, false, syntaxErr("unterminated escape")
			}
			i++
			switch s[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(s) || !isHex4(s[i+1:i+5]) {
					return 0, false, syntaxErr("bad \\u escape at %d", i)
				}
				i += 4
			default:
				return 0, false, syntaxErr("bad escape at %d", i)
			}
		case c < ' ':
			return 0, false, syntaxErr("control character in string at %d", i)
		}
	}
	return 0, false, syntaxErr("unterminated string")
}

func isHex4(s string) bool {
	for i := 0; i < 4; i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// scanNumber checks the JSON number at i and returns the index after it.
func scanNumber(s string, i int) (int, error) {
	start := i
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		i = digits(s, i)
	default:
		return 0, syntaxErr("bad value at %d", start)
	}
	if i < len(s) && s[i] == '.' {
		j := digits(s, i+1)
		if j == i+1 {
			return 0, syntaxErr("bad number at %d", start)
		}
		i = j
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := digits(s, i)
		if j == i {
			return 0, syntaxErr("bad number at %d", start)
		}
		i = j
	}
	return i, nil
}

func digits(s string, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// Raw is a string value's text without unescaping: for keys and other
// strings compared with constants (pg_query escapes only control
// characters, quotes, backslashes and '<' '>', none of which occur in keys
// or enum names).
func (d *Doc) Raw(v int32) string {
	x := &d.vals[v]
	return d.src[x.off:x.end]
}

// Str is a string value's text, unescaped; "" for null and non-strings. A
// string without escapes shares the document's memory.
func (d *Doc) Str(v int32) string {
	if v < 0 {
		return ""
	}
	x := &d.vals[v]
	if x.kind != String {
		return ""
	}
	s := d.src[x.off:x.end]
	if !x.esc {
		return s
	}
	return unescape(s)
}

// unescape decodes the escapes of a string scanString accepted. A lone
// surrogate becomes U+FFFD, as in encoding/json.
func unescape(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			b = append(b, c)
			continue
		}
		i++
		switch s[i] {
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r := hex4(s[i+1 : i+5])
			i += 4
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if i+6 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
					r2 = hex4(s[i+3 : i+7])
				}
				if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
					r = dec
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			b = utf8.AppendRune(b, r)
		default: // '"', '\\', '/'
			b = append(b, s[i])
		}
	}
	return string(b)
}

func hex4(s string) rune {
	n, _ := strconv.ParseUint(s, 16, 32)
	return rune(n)
}

// Int is a number value as an int64; 0 for an absent (negative index)
// value. A number that is not an integer in range is an error.
func (d *Doc) Int(v int32) (int64, error) {
	if v < 0 {
		return 0, nil
	}
	x := &d.vals[v]
	if x.kind != Number {
		return 0, syntaxErr("expected a number at %d", x.off)
	}
	n, err := strconv.ParseInt(d.src[x.off:x.end], 10, 64)
	if err != nil {
		return 0, syntaxErr("bad integer at %d", x.off)
	}
	return n, nil
}

// Kind is v's type; Null for an absent value.
func (d *Doc) Kind(v int32) Kind {
	if v < 0 {
		return Null
	}
	return d.vals[v].kind
}

// Next is the index just past v and its members.
func (d *Doc) Next(v int32) int32 { return d.vals[v].next }

// Offset is v's byte offset in the document, for error messages.
func (d *Doc) Offset(v int32) int { return int(d.vals[v].off) }

// Present reports whether v is a value other than null.
func (d *Doc) Present(v int32) bool { return v >= 0 && d.vals[v].kind != Null }

// NonEmpty reports whether v is a container with members.
func (d *Doc) NonEmpty(v int32) bool { return v >= 0 && d.vals[v].next > v+1 }

// Truthy reports whether v is present and true.
func (d *Doc) Truthy(v int32) bool { return v >= 0 && d.vals[v].kind == True }

// Get is the value of key in object obj, or -1. Objects in a parse tree
// have a handful of keys: a scan beats a map.
func (d *Doc) Get(obj int32, key string) int32 {
	if obj < 0 || d.vals[obj].kind != Object {
		return -1
	}
	for k := obj + 1; k < d.vals[obj].next; k = d.vals[k+1].next {
		if d.Raw(k) == key {
			return k + 1
		}
	}
	return -1
}

// Items calls f for each element of array arr (nothing when arr is absent
// or not an array) and stops at the first error.
func (d *Doc) Items(arr int32, f func(int32) error) error {
	if arr < 0 || d.vals[arr].kind != Array {
		return nil
	}
	for e := arr + 1; e < d.vals[arr].next; e = d.vals[e].next {
		if err := f(e); err != nil {
			return err
		}
	}
	return nil
}
