package ca

import (
	"crypto/sha256"
	"encoding/hex"
)

// maxPlainStem is the longest identity used as a file name as it is.
const maxPlainStem = 64

// fileStem maps an identity name to the stem of its root's file names
// (<stem>.crt, <stem>.key) inside the CA directory. A name made only of
// lower-case letters, digits, '-' and '.', not starting with '.', at most
// 64 bytes long, is its own stem, so the usual ids ("sandbox-1") stay
// readable. Any other name (a path separator, "..", NUL, upper case, a
// long name) becomes "_" and the hex SHA-256 of the name: '_' never occurs
// in a plain stem, so the two forms cannot collide, and no name can leave
// the directory or hit the lock and temporary files (which start with '.').
func fileStem(identity string) string {
	if plainStem(identity) {
		return identity
	}
	sum := sha256.Sum256([]byte(identity))
	return "_" + hex.EncodeToString(sum[:])
}

func plainStem(s string) bool {
	if s == "" || len(s) > maxPlainStem || s[0] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}
