package audit

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// checkpointMessage is what a checkpoint signs: the chain head it states.
// The prefix keeps the signature from meaning anything else.
func checkpointMessage(seq uint64, hash string) []byte {
	return []byte("egressd-audit-checkpoint-v1 seq=" + strconv.FormatUint(seq, 10) + " hash=" + hash)
}

func keyID(pub ed25519.PublicKey) string { return hex.EncodeToString(pub[:8]) }

// signCheckpoint builds a checkpoint record stating that the record with
// seq has hash.
func signCheckpoint(k ed25519.PrivateKey, seq uint64, hash string) Record {
	sig := ed25519.Sign(k, checkpointMessage(seq, hash))
	return Record{TS: time.Now(), Kind: KindCheckpoint, Detail: map[string]string{
		"seq":  strconv.FormatUint(seq, 10),
		"hash": hash,
		"sig":  base64.StdEncoding.EncodeToString(sig),
		"key":  keyID(k.Public().(ed25519.PublicKey)),
	}}
}

// checkCheckpoint verifies a checkpoint record r that follows the record
// (seq, hash).
func checkCheckpoint(pub ed25519.PublicKey, r *Record, seq uint64, hash string) error {
	d := r.Detail
	if d["seq"] != strconv.FormatUint(seq, 10) || d["hash"] != hash {
		return fmt.Errorf("checkpoint states seq %s hash %s, but the record before it is seq %d hash %s",
			d["seq"], d["hash"], seq, hash)
	}
	if pub == nil {
		return nil
	}
	if d["key"] != keyID(pub) {
		return fmt.Errorf("checkpoint signed by key %s, want %s", d["key"], keyID(pub))
	}
	sig, err := base64.StdEncoding.DecodeString(d["sig"])
	if err != nil || !ed25519.Verify(pub, checkpointMessage(seq, hash), sig) {
		return errors.New("checkpoint signature does not verify")
	}
	return nil
}

// LoadPrivateKey reads a PEM PKCS #8 Ed25519 private key.
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read signing key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("signing key %s: want a PEM \"PRIVATE KEY\" block", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("signing key %s: want Ed25519, got %T", path, k)
	}
	return ek, nil
}

// LoadPublicKey reads a PEM PKIX Ed25519 public key, or the public half of
// a private key file.
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read public key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("public key %s: no PEM block", path)
	}
	switch blk.Type {
	case "PUBLIC KEY":
		k, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("public key %s: %w", path, err)
		}
		if ek, ok := k.(ed25519.PublicKey); ok {
			return ek, nil
		}
		return nil, fmt.Errorf("public key %s: want Ed25519, got %T", path, k)
	case "PRIVATE KEY":
		k, err := LoadPrivateKey(path)
		if err != nil {
			return nil, err
		}
		return k.Public().(ed25519.PublicKey), nil
	}
	return nil, fmt.Errorf("public key %s: unexpected PEM block %q", path, blk.Type)
}
