package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/internal/identity"
)

func TestIdentityHashRoundTrip(t *testing.T) {
	const secret = "correct-horse-battery-staple"
	var out, errb bytes.Buffer
	err := runIdentityFrom(strings.NewReader(secret+"\n"), []string{"hash", "--id", "sandbox-1"}, &out, &errb)
	if err != nil {
		t.Fatalf("identity hash: %v (%s)", err, errb.String())
	}
	cfg, err := config.Parse([]byte("identities:\n" + out.String()))
	if err != nil {
		t.Fatalf("output %q is not a valid identities entry: %v", out.String(), err)
	}
	sum := sha256.Sum256([]byte(secret))
	if got := cfg.Identities[0].TokenSHA256; got != hex.EncodeToString(sum[:]) {
		t.Errorf("token_sha256 = %s; want the SHA-256 of the secret", got)
	}
	store, err := identity.New(cfg.Identities)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := store.Authenticate("sandbox-1", secret); !ok {
		t.Error("the printed entry does not authenticate the secret it was made from")
	}
}

func TestIdentityHashRefuses(t *testing.T) {
	tests := []struct {
		name  string
		stdin string
		args  []string
	}{
		{"no action", "x", nil},
		{"no id", "a-long-enough-secret", []string{"hash"}},
		{"short secret", "short", []string{"hash", "--id", "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := runIdentityFrom(strings.NewReader(tt.stdin), tt.args, &out, &errb)
			if code := exitCode(err, &errb); code != 2 {
				t.Errorf("identity %v = exit %d; want 2", tt.args, code)
			}
		})
	}
}
