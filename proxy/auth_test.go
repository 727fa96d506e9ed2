package proxy

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/netip"
	"testing"

	"github.com/egressd/egressd/proxy/identity"
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
		wantReason string
	}{
		{name: "no identities is anonymous", ids: empty, client: "10.9.9.9", wantID: "anonymous"},
		{name: "good token", ids: ids, auth: basic("sbx-1:s3cret"), client: "10.9.9.9", wantID: "sbx-1"},
		{name: "wrong token", ids: ids, auth: basic("sbx-1:nope"), client: "10.9.9.9", wantReason: reasonAuthInvalid},
		{name: "wrong token from mapped source", ids: ids, auth: basic("sbx-1:nope"), client: "10.1.2.3", wantReason: reasonAuthInvalid},
		{name: "not basic", ids: ids, auth: "Bearer x", client: "10.9.9.9", wantReason: reasonAuthInvalid},
		{name: "bad base64", ids: ids, auth: "Basic !!!", client: "10.9.9.9", wantReason: reasonAuthInvalid},
		{name: "source mapping", ids: ids, client: "10.1.2.3", wantID: "sbx-2"},
		{name: "nothing", ids: ids, client: "10.9.9.9", wantReason: reasonAuthRequired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := http.NewRequest(http.MethodGet, "http://example.com/", nil)
			if tt.auth != "" {
				r.Header.Set("Proxy-Authorization", tt.auth)
			}
			id, reason := authenticate(tt.ids, r, netip.MustParseAddr(tt.client))
			if id.ID != tt.wantID || reason != tt.wantReason {
				t.Errorf("authenticate() = %q, %q; want %q, %q", id.ID, reason, tt.wantID, tt.wantReason)
			}
		})
	}
}

func FuzzParseBasic(f *testing.F) {
	f.Add("Basic " + base64.StdEncoding.EncodeToString([]byte("sbx-1:token")))
	f.Add("basic Og==")
	f.Add("Bearer x")
	f.Fuzz(func(t *testing.T, v string) {
		user, token, ok := parseBasic(v)
		if !ok && (user != "" || token != "") {
			t.Errorf("parseBasic(%q) = %q, %q, false; want empty on failure", v, user, token)
		}
	})
}
