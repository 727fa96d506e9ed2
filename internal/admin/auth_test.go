package admin

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"
)

func sumOf(tok string) string {
	s := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(s[:])
}

// TestAuthRoutes: an authenticated route runs only for a known token
// holding its scope, and is told the client's name.
func TestAuthRoutes(t *testing.T) {
	auth, err := NewAuth([]Client{
		{Name: "studio", TokenSHA256: sumOf("s3cret-studio"), Scopes: []string{ScopeCheck}},
		{Name: "approver", TokenSHA256: sumOf("s3cret-approver"), Scopes: []string{ScopeCheck, ScopeGrant}},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := Handler(Options{Log: zap.NewNop(), Auth: auth, Routes: []Route{{Pattern: "POST /v1/grants", Scope: ScopeGrant,
		Handler: func(w http.ResponseWriter, _ *http.Request, who string) { text(w, 200, "hello "+who) }}}})
	for _, tc := range []struct {
		name, header string
		status       int
		body         string
	}{
		{"no token", "", 401, "Bearer TOKEN"},
		{"basic auth", "Basic c3R1ZGlvOng=", 401, "Bearer TOKEN"},
		{"unknown token", "Bearer nope", 401, "Bearer TOKEN"},
		{"the hash as token", "Bearer " + sumOf("s3cret-approver"), 401, "Bearer TOKEN"},
		{"lacks scope", "Bearer s3cret-studio", 403, `client "studio" lacks scope "grant"`},
		{"holds scope", "Bearer s3cret-approver", 200, "hello approver"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/v1/grants", nil)
			if tc.header != "" {
				r.Header.Set("Authorization", tc.header)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.status || !strings.Contains(w.Body.String(), tc.body) {
				t.Errorf("status %d %q; want %d containing %q", w.Code, w.Body.String(), tc.status, tc.body)
			}
		})
	}
}

// TestAuthNoClients: with no clients configured the routes are closed,
// not open.
func TestAuthNoClients(t *testing.T) {
	auth, err := NewAuth(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/", nil)
	r.Header.Set("Authorization", "Bearer x")
	if _, status := auth.Principal(r, ScopeCheck); status != http.StatusUnauthorized {
		t.Errorf("Principal with no clients = %d; want 401", status)
	}
}

func TestClientValidate(t *testing.T) {
	good := sumOf("t")
	for _, tc := range []struct {
		c    Client
		want string
	}{
		{Client{Name: "a", TokenSHA256: good, Scopes: []string{"check"}}, ""},
		{Client{TokenSHA256: good, Scopes: []string{"check"}}, "name is required"},
		{Client{Name: "a", TokenSHA256: "t", Scopes: []string{"check"}}, "64 lowercase hex digits"},
		{Client{Name: "a", TokenSHA256: strings.ToUpper(good), Scopes: []string{"check"}}, "64 lowercase hex digits"},
		{Client{Name: "a", TokenSHA256: good}, "at least one of check, grant"},
		{Client{Name: "a", TokenSHA256: good, Scopes: []string{"admin"}}, `unknown scope "admin"`},
	} {
		err := tc.c.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate(%+v) = %v; want %q", tc.c, err, tc.want)
		}
	}
}
