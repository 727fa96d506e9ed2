package audit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// The JSON scanning beneath the record decoder: only what the line layout
// uses (strings, integers, one flat object of strings).

func (d *decoder) object() (map[string]string, error) {
	if err := d.expect('{'); err != nil {
		return nil, err
	}
	m := map[string]string{}
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return m, nil
	}
	for {
		k, err := d.str()
		if err != nil {
			return nil, err
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("duplicate key %q", k)
		}
		if err := d.expect(':'); err != nil {
			return nil, err
		}
		v, err := d.str()
		if err != nil {
			return nil, err
		}
		m[k] = v
		if d.i >= len(d.b) {
			return nil, errEnd
		}
		if d.b[d.i] == '}' {
			d.i++
			return m, nil
		}
		if err := d.expect(','); err != nil {
			return nil, err
		}
	}
}

// uint reads a non-negative decimal without leading zeros.
func (d *decoder) uint(bits int) (uint64, error) {
	j := d.i
	for j < len(d.b) && d.b[j] >= '0' && d.b[j] <= '9' {
		j++
	}
	if j == d.i {
		return 0, errors.New("want a number")
	}
	if d.b[d.i] == '0' && j-d.i > 1 {
		return 0, errors.New("leading zero")
	}
	var v uint64
	for _, c := range d.b[d.i:j] {
		if v > (1<<64-1)/10 || v*10 > 1<<64-1-uint64(c-'0') {
			return 0, errors.New("number out of range")
		}
		v = v*10 + uint64(c-'0')
	}
	if bits < 64 && v >= 1<<bits {
		return 0, errors.New("number out of range")
	}
	d.i = j
	return v, nil
}

func (d *decoder) int() (int64, error) {
	neg := d.i < len(d.b) && d.b[d.i] == '-'
	if neg {
		d.i++
	}
	u, err := d.uint(64)
	if err != nil {
		return 0, err
	}
	if neg {
		if u > 1<<63 {
			return 0, errors.New("number out of range")
		}
		return -int64(u), nil
	}
	if u > 1<<63-1 {
		return 0, errors.New("number out of range")
	}
	return int64(u), nil
}

// str reads a JSON string. The common unescaped case is one allocation.
func (d *decoder) str() (string, error) {
	b, err := d.raw()
	return string(b), err
}

// raw reads a JSON string and returns its unescaped bytes: a slice of the
// line, or of d.scratch when it had escapes. Valid until the next call.
func (d *decoder) raw() ([]byte, error) {
	if err := d.expect('"'); err != nil {
		return nil, err
	}
	start := d.i
	// Skip eight plain bytes at a time; stop at the word holding a quote,
	// backslash or control character.
	for d.i+8 <= len(d.b) && !special(binary.LittleEndian.Uint64(d.b[d.i:])) {
		d.i += 8
	}
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			s := d.b[start:d.i]
			d.i++
			if !utf8.Valid(s) {
				return nil, errors.New("invalid UTF-8")
			}
			return s, nil
		case c == '\\':
			return d.rawEscaped(start)
		case c < 0x20:
			return nil, errors.New("control character in string")
		}
		d.i++
	}
	return nil, errEnd
}

// special reports whether any byte of x is '"', '\\' or below 0x20
// (exact, not approximate: the classic has-zero-byte and has-less-than
// bit tricks).
func special(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	hasZero := func(v uint64) uint64 { return (v - ones) & ^v & highs }
	less := (x - ones*0x20) & ^x & highs
	return less|hasZero(x^(ones*'"'))|hasZero(x^(ones*'\\')) != 0
}

func (d *decoder) rawEscaped(start int) ([]byte, error) {
	out := append(d.scratch[:0], d.b[start:d.i]...)
	defer func() { d.scratch = out[:0] }()
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			if !utf8.Valid(out) {
				return nil, errors.New("invalid UTF-8")
			}
			return out, nil
		case c < 0x20:
			return nil, errors.New("control character in string")
		case c != '\\':
			out = append(out, c)
			d.i++
			continue
		}
		d.i++
		if d.i >= len(d.b) {
			return nil, errEnd
		}
		e := d.b[d.i]
		d.i++
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, err := d.hex4()
			if err != nil {
				return nil, err
			}
			if utf16.IsSurrogate(r) {
				r2 := utf8.RuneError
				if d.i+1 < len(d.b) && d.b[d.i] == '\\' && d.b[d.i+1] == 'u' {
					save := d.i
					d.i += 2
					if lo, err := d.hex4(); err == nil {
						if dec := utf16.DecodeRune(r, lo); dec != utf8.RuneError {
							r2 = dec
						} else {
							d.i = save
						}
					} else {
						return nil, err
					}
				}
				r = r2
			}
			out = utf8.AppendRune(out, r)
		default:
			return nil, fmt.Errorf("bad escape \\%c", e)
		}
	}
	return nil, errEnd
}

func (d *decoder) hex4() (rune, error) {
	if d.i+4 > len(d.b) {
		return 0, errEnd
	}
	var r rune
	for _, c := range d.b[d.i : d.i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, errors.New("bad \\u escape")
		}
	}
	d.i += 4
	return r, nil
}
