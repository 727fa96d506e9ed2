package proxy

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/policy"
)

func TestAuthenticate(t *testing.T) {
	sum := sha256.Sum256([]byte("s3cret"))
	ids, err := identity.New(identity.Config{
		{ID: "sbx-1", TokenSHA256: hex.EncodeToString(sum[:])},
		{ID: "sbx-2", Sources: []string{"10.1.0.0/16"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	empty, _ := identity.New(nil)
	basic := func(s string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		name       string
		ids        *identity.Store
		auth       string
		client     string
		wantID     string
		wantReason policy.Reason
	}{
		{name: "no identities is anonymous", ids: empty, client: "10.9.9.9", wantID: "anonymous"},
		{name: "good token", ids: ids, auth: basic("sbx-1:s3cret"), client: "10.9.9.9", wantID: "sbx-1"},
		{name: "wrong token", ids: ids, auth: basic("sbx-1:nope"), client: "10.9.9.9", wantReason: policy.ReasonProxyAuthInvalid},
		{name: "wrong token from mapped source", ids: ids, auth: basic("sbx-1:nope"), client: "10.1.2.3", wantReason: policy.ReasonProxyAuthInvalid},
		{name: "not basic", ids: ids, auth: "Bearer x", client: "10.9.9.9", wantReason: policy.ReasonProxyAuthInvalid},
		{name: "bad base64", ids: ids, auth: "Basic !!!", client: "10.9.9.9", wantReason: policy.ReasonProxyAuthInvalid},
		{name: "source mapping", ids: ids, client: "10.1.2.3", wantID: "sbx-2"},
		{name: "nothing", ids: ids, client: "10.9.9.9", wantReason: policy.ReasonProxyAuthRequired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := http.NewRequest(http.MethodGet, "http://example.com/", nil)
			if tt.auth != "" {
				r.Header.Set("Proxy-Authorization", tt.auth)
			}
			id, _, reason := authenticate(tt.ids, r, netip.MustParseAddr(tt.client))
			if id.ID != tt.wantID || reason != tt.wantReason {
				t.Errorf("authenticate() = %q, %q; want %q, %q", id.ID, reason, tt.wantID, tt.wantReason)
			}
		})
	}
}

// After a reload, a credential that authenticated before is asked again:
// a rotated token, a removed identity or a source mapped elsewhere is
// refused; an unchanged one keeps its identity with its new attributes.
func TestReauthenticate(t *testing.T) {
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	store := func(c identity.Config) *identity.Store {
		s, err := identity.New(c)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := store(identity.Config{
		{ID: "sbx-1", TokenSHA256: sum("s3cret")},
		{ID: "sbx-2", Sources: []string{"10.1.0.0/16"}},
	})
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("sbx-1:s3cret"))
	tests := []struct {
		name       string
		auth       string
		client     string
		after      *identity.Store
		wantID     string
		wantReason policy.Reason
	}{
		{name: "token unchanged", auth: basic, client: "10.9.9.9",
			after: store(identity.Config{{ID: "sbx-1", TokenSHA256: sum("s3cret"), Attributes: map[string]string{"tier": "b"}}}), wantID: "sbx-1"},
		{name: "token rotated", auth: basic, client: "10.9.9.9",
			after: store(identity.Config{{ID: "sbx-1", TokenSHA256: sum("n3w")}}), wantReason: policy.ReasonIdentityRevoked},
		{name: "identity removed", auth: basic, client: "10.9.9.9",
			after: store(identity.Config{{ID: "other", TokenSHA256: sum("x")}}), wantReason: policy.ReasonIdentityRevoked},
		{name: "source still mapped", client: "10.1.2.3",
			after: store(identity.Config{{ID: "sbx-2", Sources: []string{"10.1.2.0/24"}}}), wantID: "sbx-2"},
		{name: "source mapped elsewhere", client: "10.1.2.3",
			after: store(identity.Config{{ID: "sbx-3", Sources: []string{"10.1.0.0/16"}}}), wantReason: policy.ReasonIdentityRevoked},
		{name: "identities emptied", auth: basic, client: "10.9.9.9", after: store(nil), wantID: "anonymous"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := http.NewRequest(http.MethodConnect, "http://example.com:443", nil)
			if tt.auth != "" {
				r.Header.Set("Proxy-Authorization", tt.auth)
			}
			id, cred, reason := authenticate(before, r, netip.MustParseAddr(tt.client))
			if reason != "" {
				t.Fatalf("authenticate() before the reload = %q", reason)
			}
			got, _, reason := reauthenticate(tt.after, id.ID, cred)
			if got.ID != tt.wantID || reason != tt.wantReason {
				t.Errorf("reauthenticate() = %q, %q; want %q, %q", got.ID, reason, tt.wantID, tt.wantReason)
			}
			if tt.name == "token unchanged" && got.Attributes["tier"] != "b" {
				t.Errorf("reauthenticate() attributes = %v; want the reloaded ones", got.Attributes)
			}
		})
	}
}

// FuzzParseBasic checks parseBasic both ways: what it accepts is the
// user:token base64 decodes to, split at the first colon (so it encodes
// back to a credential that parses to the same pair), and any user
// without a colon and any token, encoded, parse back to themselves.
func FuzzParseBasic(f *testing.F) {
	f.Add("Basic " + base64.StdEncoding.EncodeToString([]byte("sbx-1:token")))
	f.Add("basic Og==")
	f.Add("Bearer x")
	f.Add("sbx-1:to:ken")
	f.Fuzz(func(t *testing.T, v string) {
		user, token, ok := parseBasic(v)
		if !ok && (user != "" || token != "") {
			t.Errorf("parseBasic(%q) = %q, %q, false; want empty on failure", v, user, token)
		}
		if ok {
			if strings.Contains(user, ":") {
				t.Errorf("parseBasic(%q) = user %q; want the split at the first colon", v, user)
			}
			enc := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+token))
			if u, tok, ok := parseBasic(enc); !ok || u != user || tok != token {
				t.Errorf("parseBasic(%q) = %q, %q; its encoding %q parses to %q, %q, %v", v, user, token, enc, u, tok, ok)
			}
		}
		// v as a credential in the clear: user up to the first colon.
		u, tok, _ := strings.Cut(v, ":")
		enc := "Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"+tok))
		if gu, gtok, ok := parseBasic(enc); !ok || gu != u || gtok != tok {
			t.Errorf("parseBasic(%q) = %q, %q, %v; want %q, %q, true", enc, gu, gtok, ok, u, tok)
		}
	})
}
