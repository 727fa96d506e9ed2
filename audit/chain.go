package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
)

// zeroHash is the prev of the very first record of a log.
var zeroHash [sha256.Size]byte

// splitLine finds the fixed-position prev and hash fields of a line
// (without its newline). body is the line without its hash field and
// closing brace, the bytes the hash covers (plus "}").
func splitLine(line []byte) (body, prevHex, hashHex []byte, err error) {
	n := len(line)
	if n < minLine || line[n-1] != '}' || line[n-2] != '"' ||
		!bytes.Equal(line[n-hashSuffix:n-hashSuffix+len(`,"hash":"`)], []byte(`,"hash":"`)) {
		return nil, nil, nil, errors.New("line does not end with a hash field")
	}
	hashHex = line[n-2-hexLen : n-2]
	body = line[:n-hashSuffix]
	m := len(body)
	if body[m-1] != '"' || !bytes.Equal(body[m-prevSuffix:m-prevSuffix+len(`,"prev":"`)], []byte(`,"prev":"`)) {
		return nil, nil, nil, errors.New("hash field is not preceded by a prev field")
	}
	prevHex = body[m-1-hexLen : m-1]
	return body, prevHex, hashHex, nil
}

// lineSum computes the hash a line must carry: SHA-256 over prev (raw) and
// the body followed by "}". h is reused by the caller.
func lineSum(h hash.Hash, prev *[sha256.Size]byte, body []byte, out *[sha256.Size]byte) {
	h.Reset()
	h.Write(prev[:])
	h.Write(body)
	h.Write(closeBrace)
	h.Sum(out[:0])
}

// decodeHex decodes a 64-digit lowercase hex hash.
func decodeHex(dst *[sha256.Size]byte, src []byte) bool {
	if len(src) != hexLen {
		return false
	}
	for _, c := range src {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	_, err := hex.Decode(dst[:], src)
	return err == nil
}
