package pggate

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
)

const scramMechanism = "SCRAM-SHA-256"

// verifier is a parsed PostgreSQL SCRAM-SHA-256 verifier.
type verifier struct {
	iter      int
	salt      []byte
	storedKey []byte
	serverKey []byte
}

// parseVerifier reads "SCRAM-SHA-256$<iter>:<salt>$<StoredKey>:<ServerKey>".
func parseVerifier(s string) (*verifier, error) {
	rest, ok := strings.CutPrefix(s, scramMechanism+"$")
	if !ok {
		return nil, errors.New("not a SCRAM-SHA-256 verifier")
	}
	params, keys, ok := strings.Cut(rest, "$")
	if !ok {
		return nil, errors.New("malformed verifier")
	}
	iterS, saltS, ok1 := strings.Cut(params, ":")
	storedS, serverS, ok2 := strings.Cut(keys, ":")
	if !ok1 || !ok2 {
		return nil, errors.New("malformed verifier")
	}
	v := &verifier{}
	var err error
	if v.iter, err = strconv.Atoi(iterS); err != nil || v.iter <= 0 {
		return nil, errors.New("malformed verifier iteration count")
	}
	dec := base64.StdEncoding
	if v.salt, err = dec.DecodeString(saltS); err != nil {
		return nil, errors.New("malformed verifier salt")
	}
	if v.storedKey, err = dec.DecodeString(storedS); err != nil || len(v.storedKey) != sha256.Size {
		return nil, errors.New("malformed verifier StoredKey")
	}
	if v.serverKey, err = dec.DecodeString(serverS); err != nil || len(v.serverKey) != sha256.Size {
		return nil, errors.New("malformed verifier ServerKey")
	}
	return v, nil
}

func hmacSum(key []byte, msg string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msg))
	return h.Sum(nil)
}

// errAuthFailed is the one answer to every authentication failure, so a
// client cannot tell an unknown identity from a wrong password.
var errAuthFailed = errors.New("password authentication failed")

// scramServer runs the server side of SCRAM-SHA-256 (RFC 7677) over be.
// v is nil for an unknown identity: the exchange then runs to the end with
// a fake verifier and fails, costing the same round trips.
func scramServer(be *pgproto3.Backend, v *verifier, fakeSalt []byte) error {
	known := v != nil
	if !known {
		v = &verifier{iter: 4096, salt: fakeSalt, storedKey: make([]byte, sha256.Size), serverKey: make([]byte, sha256.Size)}
	}
	be.Send(&pgproto3.AuthenticationSASL{AuthMechanisms: []string{scramMechanism}})
	if err := be.Flush(); err != nil {
		return err
	}
	if err := be.SetAuthType(pgproto3.AuthTypeSASL); err != nil {
		return err
	}
	msg, err := be.Receive()
	if err != nil {
		return fmt.Errorf("read SASL initial response: %w", err)
	}
	init, ok := msg.(*pgproto3.SASLInitialResponse)
	if !ok || init.AuthMechanism != scramMechanism {
		return errAuthFailed
	}
	gs2, bare, cnonce, err := parseClientFirst(string(init.Data))
	if err != nil {
		return err
	}
	snonce := make([]byte, 18)
	rand.Read(snonce)
	nonce := cnonce + base64.StdEncoding.EncodeToString(snonce)
	serverFirst := "r=" + nonce + ",s=" + base64.StdEncoding.EncodeToString(v.salt) + ",i=" + strconv.Itoa(v.iter)
	be.Send(&pgproto3.AuthenticationSASLContinue{Data: []byte(serverFirst)})
	if err := be.Flush(); err != nil {
		return err
	}
	if err := be.SetAuthType(pgproto3.AuthTypeSASLContinue); err != nil {
		return err
	}
	msg, err = be.Receive()
	if err != nil {
		return fmt.Errorf("read SASL response: %w", err)
	}
	resp, ok := msg.(*pgproto3.SASLResponse)
	if !ok {
		return errAuthFailed
	}
	final := string(resp.Data)
	withoutProof, proofB64, ok := strings.Cut(final, ",p=")
	if !ok || strings.Contains(proofB64, ",") {
		return errAuthFailed
	}
	if withoutProof != "c="+base64.StdEncoding.EncodeToString([]byte(gs2))+",r="+nonce {
		return errAuthFailed
	}
	proof, err := base64.StdEncoding.DecodeString(proofB64)
	if err != nil || len(proof) != sha256.Size {
		return errAuthFailed
	}
	authMessage := bare + "," + serverFirst + "," + withoutProof
	clientSig := hmacSum(v.storedKey, authMessage)
	clientKey := make([]byte, sha256.Size)
	for i := range clientKey {
		clientKey[i] = proof[i] ^ clientSig[i]
	}
	got := sha256.Sum256(clientKey)
	if subtle.ConstantTimeCompare(got[:], v.storedKey) != 1 || !known {
		return errAuthFailed
	}
	serverSig := hmacSum(v.serverKey, authMessage)
	be.Send(&pgproto3.AuthenticationSASLFinal{Data: []byte("v=" + base64.StdEncoding.EncodeToString(serverSig))})
	return nil
}

// parseClientFirst splits "gs2-header client-first-bare". Channel binding
// ("p=") is refused: the gate does not offer SCRAM-SHA-256-PLUS.
func parseClientFirst(s string) (gs2, bare, cnonce string, err error) {
	parts := strings.SplitN(s, ",", 3)
	if len(parts) != 3 || (parts[0] != "n" && parts[0] != "y") || parts[1] != "" {
		return "", "", "", errAuthFailed
	}
	gs2 = parts[0] + ",,"
	bare = parts[2]
	for _, attr := range strings.Split(bare, ",") {
		switch {
		case strings.HasPrefix(attr, "r="):
			cnonce = attr[2:]
		case strings.HasPrefix(attr, "m="):
			return "", "", "", errAuthFailed
		}
	}
	if cnonce == "" || strings.ContainsAny(cnonce, ", ") {
		return "", "", "", errAuthFailed
	}
	return gs2, bare, cnonce, nil
}
