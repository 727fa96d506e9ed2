package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"

	"github.com/egressd/egressd/policy"
)

func hashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func testStore(t *testing.T) *Store {
	t.Helper()
	s, err := New(Config{
		{ID: "alpha", TokenSHA256: hashHex("s3cret"), Attributes: map[string]string{"team": "a"}},
		{ID: "beta", Sources: []string{"10.1.0.0/16"}},
		{ID: "gamma", Sources: []string{"10.1.2.0/24", "fd00:1::/64"}},
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func TestAuthenticate(t *testing.T) {
	s := testStore(t)
	tests := []struct {
		name, id, token string
		ok              bool
	}{
		{"right token", "alpha", "s3cret", true},
		{"wrong token", "alpha", "s3cret!", false},
		{"empty token", "alpha", "", false},
		{"unknown id", "nobody", "s3cret", false},
		{"identity without token", "beta", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := s.Authenticate(tt.id, tt.token)
			if ok != tt.ok {
				t.Fatalf("Authenticate(%q, %q) ok = %v; want %v", tt.id, tt.token, ok, tt.ok)
			}
			if ok && (got.ID != tt.id || got.Attributes["team"] != "a") {
				t.Errorf("Authenticate(%q) = %+v; want id %q with attributes", tt.id, got, tt.id)
			}
		})
	}
}

func TestBySourceLongestPrefix(t *testing.T) {
	s := testStore(t)
	tests := []struct {
		addr, want string
	}{
		{"10.1.2.3", "gamma"},
		{"10.1.3.3", "beta"},
		{"::ffff:10.1.2.3", "gamma"},
		{"fd00:1::5", "gamma"},
		{"10.2.0.1", ""},
	}
	for _, tt := range tests {
		got, ok := s.BySource(netip.MustParseAddr(tt.addr))
		if got.ID != tt.want || ok != (tt.want != "") {
			t.Errorf("BySource(%s) = %q, %v; want %q", tt.addr, got.ID, ok, tt.want)
		}
	}
}

func TestLookup(t *testing.T) {
	s := testStore(t)
	if e, id, ok := s.Lookup("alpha"); !ok || e.ID != "alpha" || id.ID != "alpha" {
		t.Errorf("Lookup(alpha) = %+v, %+v, %v; want alpha", e, id, ok)
	}
	if _, _, ok := s.Lookup("zeta"); ok {
		t.Error("Lookup(zeta) ok = true; want false")
	}
	if s.Len() != 3 {
		t.Errorf("Len() = %d; want 3", s.Len())
	}
}

func TestNewRejectsInvalid(t *testing.T) {
	tests := []struct {
		name string
		c    Config
	}{
		{"empty id", Config{{ID: "", Sources: []string{"10.0.0.0/8"}}}},
		{"colon in id", Config{{ID: "a:b", Sources: []string{"10.0.0.0/8"}}}},
		{"short hash", Config{{ID: "a", TokenSHA256: "00"}}},
		{"bad scram", Config{{ID: "a", SCRAMSHA256: "md5abc"}}},
		{"bad cidr", Config{{ID: "a", Sources: []string{"nope"}}}},
		{"bad mode", Config{{ID: "a", Sources: []string{"10.0.0.0/8"}, Mode: "audit"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.c); err == nil {
				t.Errorf("New(%+v) error = nil; want an error", tt.c)
			}
		})
	}
}

// TestValidateNeverEchoesSecrets: an error about token_sha256 or
// scram_sha256 names the key and what to do, never the value: the usual
// mistake is pasting the token or password itself (item 16).
func TestValidateNeverEchoesSecrets(t *testing.T) {
	const secret = "tok-S3cretPastedHere"
	tests := []struct {
		name, key string
		c         Config
	}{
		{"raw token in token_sha256", "[0].token_sha256", Config{{ID: "a", TokenSHA256: secret}}},
		{"raw password in scram_sha256", "[0].scram_sha256", Config{{ID: "a", SCRAMSHA256: secret}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.key) || !strings.Contains(err.Error(), "egressd identity hash") {
				t.Fatalf("Validate() error = %v; want one naming %s and egressd identity hash", err, tt.key)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), secret[4:12]) {
				t.Errorf("Validate() error = %q; it echoes the secret", err)
			}
		})
	}
}

// TestValidateRefusesIdentityNoOneCanBe: an entry with no token, no SCRAM
// verifier and no source can never be used (item 17): it is refused with
// what to do, while each one of the three alone is enough.
func TestValidateRefusesIdentityNoOneCanBe(t *testing.T) {
	err := Config{{ID: "ghost", Attributes: map[string]string{"tier": "1"}}}.Validate()
	if err == nil || !strings.Contains(err.Error(), `[0] (id "ghost") has no token_sha256, scram_sha256 or sources`) {
		t.Errorf("Validate(no credential, no source) error = %v; want one naming the entry and the three keys", err)
	}
	for _, e := range []Entry{
		{ID: "t", TokenSHA256: hashHex("x")},
		{ID: "s", SCRAMSHA256: "SCRAM-SHA-256$4096:c2FsdA==$a:b"},
		{ID: "src", Sources: []string{"10.0.0.0/8"}},
	} {
		if err := (Config{e}).Validate(); err != nil {
			t.Errorf("Validate(%+v) error = %v; want nil", e, err)
		}
	}
}

// TestMode: an identity's mode reaches policy.Identity; a mode that is not
// enforce or observe is refused, naming the key.
func TestMode(t *testing.T) {
	s, err := New(Config{
		{ID: "watched", Sources: []string{"10.9.0.0/16"}, Mode: "observe"},
		{ID: "plain", Sources: []string{"10.8.0.0/16"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, id, _ := s.Lookup("watched"); id.Mode != policy.ModeObserve {
		t.Errorf("Lookup(watched).Mode = %v; want observe", id.Mode)
	}
	if id, _ := s.BySource(netip.MustParseAddr("10.8.0.1")); id.Mode != policy.ModeEnforce {
		t.Errorf("BySource(plain).Mode = %v; want enforce", id.Mode)
	}
	err = Config{{ID: "a", Sources: []string{"10.0.0.0/8"}, Mode: "watch"}}.Validate()
	if want := `[0].mode must be "enforce" or "observe", got "watch" (id "a")`; err == nil || err.Error() != want {
		t.Errorf("Validate(mode watch) = %v; want %s", err, want)
	}
}
