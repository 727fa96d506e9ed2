package identity

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
)

// SCRAMVerifier builds the verifier PostgreSQL would store for password,
// the format of an entry's scram_sha256 field. If salt is nil, 16 random
// bytes are used; if iter is zero, 4096.
func SCRAMVerifier(password string, salt []byte, iter int) (string, error) {
	if salt == nil {
		salt = make([]byte, 16)
		rand.Read(salt)
	}
	if iter == 0 {
		iter = 4096
	}
	salted, err := pbkdf2.Key(sha256.New, password, salt, iter, sha256.Size)
	if err != nil {
		return "", fmt.Errorf("derive key: %w", err)
	}
	stored := sha256.Sum256(hmacSum(salted, "Client Key"))
	enc := base64.StdEncoding
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", iter, enc.EncodeToString(salt),
		enc.EncodeToString(stored[:]), enc.EncodeToString(hmacSum(salted, "Server Key"))), nil
}

func hmacSum(key []byte, msg string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msg))
	return h.Sum(nil)
}
