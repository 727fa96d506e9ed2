package policy

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// PathFlags are the path facts base rules refuse. Each one marks a spelling
// that two parsers (egressd's and the upstream's) could split into
// different segments, so a path rule could be dodged.
type PathFlags uint16

// The flags, in the order Rego sees them; the first one present is the
// deny reason.
const (
	FlagEncodedSeparator PathFlags = 1 << iota // %2F or %5C, any case
	FlagDoubleEncoding                         // %25 followed by two hex digits
	FlagEncodedDot                             // %2E, any case
	FlagDotSegment                             // "." or ".." segment (or dots and spaces), raw or decoded
	FlagEmptySegment                           // "//"
	FlagBackslash                              // a raw "\"
	FlagControlCharacter                       // bytes 0x00-0x1F or 0x7F, raw or decoded
	FlagPathParameter                          // ";", raw or decoded
	FlagInvalidUTF8                            // decoded bytes that are not UTF-8, overlong forms among them
	flagCount            = iota
)

var flagNames = [flagCount]string{
	"encoded_separator",
	"double_encoding",
	"encoded_dot",
	"dot_segment",
	"empty_segment",
	"backslash",
	"control_character",
	"path_parameter",
	"invalid_utf8",
}

// Names lists the set flags in order.
func (f PathFlags) Names() []string {
	names := make([]string, 0, flagCount)
	for i := range flagCount {
		if f&(1<<i) != 0 {
			names = append(names, flagNames[i])
		}
	}
	return names
}

func (f PathFlags) String() string { return strings.Join(f.Names(), ",") }

// MarshalJSON writes the flags as an array of names.
func (f PathFlags) MarshalJSON() ([]byte, error) { return json.Marshal(f.Names()) }

// parsePath flags a raw path and returns it percent-decoded once. A path
// that does not decode is a *DenyError.
func parsePath(raw string) (decoded string, flags PathFlags, err error) {
	if len(raw) > maxPath {
		return "", 0, deny(ReasonPathTooLong, "", nil)
	}
	hasPct := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == '%':
			if i+2 >= len(raw) || !isHex(raw[i+1]) || !isHex(raw[i+2]) {
				return "", 0, deny(ReasonMalformedURL, "invalid percent-encoding in path", nil)
			}
			hasPct = true
			v := unhex(raw[i+1])<<4 | unhex(raw[i+2])
			switch v {
			case '/', '\\':
				flags |= FlagEncodedSeparator
			case '.':
				flags |= FlagEncodedDot
			case '%':
				if i+4 < len(raw) && isHex(raw[i+3]) && isHex(raw[i+4]) {
					flags |= FlagDoubleEncoding
				}
			}
			i += 2
		case c == '\\':
			flags |= FlagBackslash
		case c < 0x20 || c == 0x7f:
			flags |= FlagControlCharacter
		case c == ';':
			flags |= FlagPathParameter
		}
	}
	decoded = raw
	if hasPct {
		decoded = percentDecode(raw)
		for i := 0; i < len(decoded); i++ {
			switch c := decoded[i]; {
			case c < 0x20 || c == 0x7f:
				flags |= FlagControlCharacter
			case c == ';':
				flags |= FlagPathParameter
			}
		}
	}
	flags |= utf8Flags(decoded)
	flags |= segmentFlags(raw) | segmentFlags(decoded)
	return decoded, flags, nil
}

// utf8Flags flags the bytes of a decoded path that are not UTF-8. Some
// decoders (old IIS, Tomcat, Java's modified UTF-8) read an overlong form
// of an ASCII byte as that byte, so %C0%AF is "/" to them though it is no
// separator to egressd: an overlong form also gets the flags the byte
// itself would, an overlong "/" or "\" being an encoded separator and an
// overlong "." an encoded dot. Each byte is looked at once.
func utf8Flags(s string) PathFlags {
	var f PathFlags
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			i++
			continue
		}
		if r, n := utf8.DecodeRuneInString(s[i:]); r != utf8.RuneError || n > 1 {
			i += n
			continue
		}
		f |= FlagInvalidUTF8
		if c, n, ok := overlongASCII(s[i:]); ok {
			f |= asciiFlags(c)
			i += n
			continue
		}
		i++
	}
	return f
}

// overlongASCII reads an overlong encoding of an ASCII byte at the start
// of s in any length from 2 to 6 bytes (the 5- and 6-byte forms of the
// original UTF-8 too) and returns the byte and the encoding's length.
func overlongASCII(s string) (c byte, n int, ok bool) {
	lead := s[0]
	switch {
	case lead&0xE0 == 0xC0:
		n = 2
	case lead&0xF0 == 0xE0:
		n = 3
	case lead&0xF8 == 0xF0:
		n = 4
	case lead&0xFC == 0xF8:
		n = 5
	case lead&0xFE == 0xFC:
		n = 6
	default:
		return 0, 0, false
	}
	if len(s) < n {
		return 0, 0, false
	}
	v := uint32(lead & (0x7F >> n))
	for j := 1; j < n; j++ {
		if s[j]&0xC0 != 0x80 {
			return 0, 0, false
		}
		v = v<<6 | uint32(s[j]&0x3F)
	}
	if v >= utf8.RuneSelf {
		return 0, 0, false
	}
	return byte(v), n, true
}

// asciiFlags are the flags an ASCII byte that arrived encoded (here, as
// an overlong form) carries.
func asciiFlags(c byte) PathFlags {
	switch {
	case c == '/' || c == '\\':
		return FlagEncodedSeparator
	case c == '.':
		return FlagEncodedDot
	case c < 0x20 || c == 0x7f:
		return FlagControlCharacter
	case c == ';':
		return FlagPathParameter
	}
	return 0
}

// segmentFlags flags dot and empty segments of p.
func segmentFlags(p string) PathFlags {
	var f PathFlags
	start := 0
	for i := 0; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			continue
		}
		seg := p[start:i]
		if isDotSegment(seg) {
			f |= FlagDotSegment
		}
		// An empty segment between two slashes; the root and a trailing
		// slash are ordinary.
		if seg == "" && i > 0 && i < len(p) {
			f |= FlagEmptySegment
		}
		start = i + 1
	}
	return f
}

// isDotSegment reports "." and "..", and any segment of dots and spaces
// with a dot: Win32 path normalization drops a segment's trailing dots and
// spaces, so a Windows-backed server may read ".. " or "..." (decoded
// "..%20") as "..", a step out of the tree an allow rule names.
func isDotSegment(seg string) bool {
	if strings.Trim(seg, ". ") != "" {
		return false
	}
	return strings.IndexByte(seg, '.') >= 0
}

func unhex(c byte) byte {
	v, _ := digitVal(c)
	return byte(v)
}

// percentDecode decodes %XX once; parsePath has checked every escape.
func percentDecode(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
