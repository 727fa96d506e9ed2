package dnsguard

import (
	"strconv"
	"strings"

	"github.com/egressd/egressd/internal/hostname"
	"github.com/egressd/egressd/policy"
)

// normalizeName lowercases name, drops one trailing dot, and refuses what is
// not a host name (see internal/hostname): escaped binary labels are a
// tunnelling channel, and no policy rule names them.
func normalizeName(name string) (string, error) {
	name = strings.TrimSuffix(name, ".")
	n, fault := hostname.Normalize(name)
	switch fault {
	case hostname.OK:
		return n, nil
	case hostname.EmptyName:
		return "", &policy.DenyError{Reason: policy.ReasonMalformedName, Detail: "empty name"}
	case hostname.TooLong:
		return "", &policy.DenyError{Reason: policy.ReasonNameTooLong, Detail: "name longer than 253 characters"}
	case hostname.LabelTooLong:
		return "", &policy.DenyError{Reason: policy.ReasonLabelTooLong, Detail: "label longer than 63 characters in " + quoteName(name)}
	case hostname.BadByte:
		return "", &policy.DenyError{Reason: policy.ReasonMalformedName, Detail: "invalid character in " + quoteName(name)}
	default:
		return "", &policy.DenyError{Reason: policy.ReasonMalformedName, Detail: "empty label in " + quoteName(name)}
	}
}

// quoteName bounds and quotes a name for an error detail.
func quoteName(name string) string {
	if len(name) > 80 {
		name = name[:80] + "..."
	}
	return strconv.Quote(name)
}
