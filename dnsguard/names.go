package dnsguard

import (
	"strconv"
	"strings"

	"github.com/egressd/egressd/policy"
)

// Name limits (RFC 1035): 253 characters in presentation form without the
// trailing dot, 63 per label.
const (
	maxNameLen  = 253
	maxLabelLen = 63
)

// normalizeName lowercases name, drops one trailing dot, and refuses what is
// not a host name: empty labels, over-long names or labels, and bytes other
// than letters, digits, '-' and '_' (escaped binary labels are a tunnelling
// channel, and no policy rule names them).
func normalizeName(name string) (string, error) {
	name = strings.TrimSuffix(name, ".")
	if name == "" {
		return "", &policy.DenyError{Reason: policy.ReasonMalformedName, Detail: "empty name"}
	}
	if len(name) > maxNameLen {
		return "", &policy.DenyError{Reason: policy.ReasonNameTooLong, Detail: "name longer than 253 characters"}
	}
	label, upper := 0, false
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '.':
			if label == 0 {
				return "", &policy.DenyError{Reason: policy.ReasonMalformedName, Detail: "empty label in " + quoteName(name)}
			}
			label = 0
			continue
		case 'A' <= c && c <= 'Z':
			upper = true
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		default:
			return "", &policy.DenyError{Reason: policy.ReasonMalformedName, Detail: "invalid character in " + quoteName(name)}
		}
		label++
		if label > maxLabelLen {
			return "", &policy.DenyError{Reason: policy.ReasonLabelTooLong, Detail: "label longer than 63 characters in " + quoteName(name)}
		}
	}
	if label == 0 {
		return "", &policy.DenyError{Reason: policy.ReasonMalformedName, Detail: "empty label in " + quoteName(name)}
	}
	if upper {
		name = strings.ToLower(name)
	}
	return name, nil
}

// quoteName bounds and quotes a name for an error detail.
func quoteName(name string) string {
	if len(name) > 80 {
		name = name[:80] + "..."
	}
	return strconv.Quote(name)
}
