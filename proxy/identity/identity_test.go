package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"testing"
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
		{"empty id", Config{{ID: ""}}},
		{"colon in id", Config{{ID: "a:b"}}},
		{"short hash", Config{{ID: "a", TokenSHA256: "00"}}},
		{"bad scram", Config{{ID: "a", SCRAMSHA256: "md5abc"}}},
		{"bad cidr", Config{{ID: "a", Sources: []string{"nope"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.c); err == nil {
				t.Errorf("New(%+v) error = nil; want an error", tt.c)
			}
		})
	}
}
