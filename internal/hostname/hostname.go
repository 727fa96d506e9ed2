// Package hostname checks and lower-cases DNS host names the one way the
// policy, the DNS guard and the CA agree on: labels of letters, digits,
// '-' and '_', none empty or longer than 63 bytes, at most 253 bytes in
// all (RFC 1035, presentation form without the trailing dot). Escaped or
// binary labels are refused: no rule names them, and they are a
// tunnelling channel.
package hostname

import "strings"

// Length limits of a name (RFC 1035).
const (
	MaxLen      = 253
	MaxLabelLen = 63
)

// Fault says why a name is not a host name.
type Fault uint8

// Faults, the first one met scanning from the left; OK means none.
const (
	OK           Fault = iota
	EmptyName          // the name is empty
	TooLong            // longer than MaxLen
	EmptyLabel         // two dots in a row, or a leading or trailing dot
	BadByte            // a byte other than a letter, digit, '-' or '_'
	LabelTooLong       // a label longer than MaxLabelLen
)

// Normalize returns name lower-cased, or the first Fault that makes it no
// host name. Callers drop one trailing dot first if they accept it. It
// allocates only when name has upper-case letters: it is on the hot path
// of every decision and every minted leaf.
func Normalize(name string) (string, Fault) {
	if name == "" {
		return "", EmptyName
	}
	if len(name) > MaxLen {
		return "", TooLong
	}
	label, upper := 0, false
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '.':
			if label == 0 {
				return "", EmptyLabel
			}
			label = 0
			continue
		case 'A' <= c && c <= 'Z':
			upper = true
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		default:
			return "", BadByte
		}
		if label++; label > MaxLabelLen {
			return "", LabelTooLong
		}
	}
	if label == 0 {
		return "", EmptyLabel
	}
	if upper {
		return strings.ToLower(name), OK
	}
	return name, OK
}
