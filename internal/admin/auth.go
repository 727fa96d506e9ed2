package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// The scopes a client token may hold. Each authenticated route names the
// one it needs.
const (
	// ScopeCheck asks the live bundle what it would decide.
	ScopeCheck = "check"
	// ScopeGrant creates, lists and revokes time-bound grants.
	ScopeGrant = "grant"
)

// Scopes are every scope a client may be given, for config validation.
var Scopes = []string{ScopeCheck, ScopeGrant}

// Client is one bearer token the admin listener accepts on its
// authenticated routes: only the SHA-256 of the token is configured, so
// the config file holds nothing that authenticates by itself.
type Client struct {
	// Name is the principal: the "who" in the records of what it does.
	Name string `yaml:"name"`
	// TokenSHA256 is the lowercase hex SHA-256 of the bearer token.
	TokenSHA256 string `yaml:"token_sha256"`
	// Scopes are what it may do (check, grant).
	Scopes []string `yaml:"scopes"`
}

// Validate checks c without I/O; field names are as in the config.
func (c Client) Validate() error {
	if c.Name == "" {
		return fmt.Errorf("name is required")
	}
	if b, err := hex.DecodeString(c.TokenSHA256); err != nil || len(b) != sha256.Size || strings.ToLower(c.TokenSHA256) != c.TokenSHA256 {
		return fmt.Errorf("token_sha256 of %q must be 64 lowercase hex digits (sha256sum of the token), got %q", c.Name, c.TokenSHA256)
	}
	if len(c.Scopes) == 0 {
		return fmt.Errorf("scopes of %q must list at least one of %s", c.Name, strings.Join(Scopes, ", "))
	}
	for _, s := range c.Scopes {
		if !slices.Contains(Scopes, s) {
			return fmt.Errorf("scopes of %q: unknown scope %q; want one of %s", c.Name, s, strings.Join(Scopes, ", "))
		}
	}
	return nil
}

// Auth authenticates bearer tokens against the configured clients.
type Auth struct {
	clients []authClient
}

type authClient struct {
	name   string
	sum    [sha256.Size]byte
	scopes []string
}

// NewAuth builds an Auth from validated clients. With none, every
// authenticated route answers 401: there is no open mode.
func NewAuth(clients []Client) (*Auth, error) {
	a := &Auth{}
	for _, c := range clients {
		if err := c.Validate(); err != nil {
			return nil, err
		}
		var ac authClient
		hex.Decode(ac.sum[:], []byte(c.TokenSHA256)) //nolint:errcheck // Validate checked it
		ac.name, ac.scopes = c.Name, c.Scopes
		a.clients = append(a.clients, ac)
	}
	return a, nil
}

// Principal returns the name of the client whose token r carries
// (Authorization: Bearer TOKEN), if it holds scope. status is 401 for a
// missing or unknown token and 403 for a known one without the scope.
func (a *Auth) Principal(r *http.Request, scope string) (name string, status int) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" || a == nil {
		return "", http.StatusUnauthorized
	}
	sum := sha256.Sum256([]byte(tok))
	found := -1
	// Compare with every client, in constant time each, so the time taken
	// says nothing about which hash came close.
	for i := range a.clients {
		if subtle.ConstantTimeCompare(sum[:], a.clients[i].sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", http.StatusUnauthorized
	}
	c := a.clients[found]
	if !slices.Contains(c.scopes, scope) {
		return c.name, http.StatusForbidden
	}
	return c.name, http.StatusOK
}

// Route is an authenticated admin route: Handler runs only for a client
// holding Scope, and is given its name.
type Route struct {
	// Pattern is a net/http ServeMux pattern ("POST /v1/check").
	Pattern string
	Scope   string
	Handler func(w http.ResponseWriter, r *http.Request, principal string)
}

// authenticated wraps rt with a's check.
func (a *Auth) authenticated(rt Route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, status := a.Principal(r, rt.Scope)
		switch status {
		case http.StatusOK:
			rt.Handler(w, r, name)
		case http.StatusForbidden:
			text(w, status, fmt.Sprintf("client %q lacks scope %q: add it to its admin.clients entry\n", name, rt.Scope))
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="egressd-admin"`)
			text(w, http.StatusUnauthorized, "send Authorization: Bearer TOKEN for a token whose sha256 is in admin.clients\n")
		}
	}
}
