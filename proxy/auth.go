package proxy

import (
	"encoding/base64"
	"net/http"
	"net/netip"
	"strings"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/identity"
)

// anonymous is the identity of every client when no identities are
// configured at all.
var anonymous = policy.Identity{ID: "anonymous"}

// authenticate names the client of r: Basic credentials when sent, else a
// source-CIDR mapping, else anonymous when the table is empty. A missing or
// wrong credential is a refusal with reason proxy_auth_required or
// proxy_auth_invalid; wrong credentials never fall back to the source
// mapping, so a mapped address cannot mask a guessing client.
func authenticate(ids *identity.Store, r *http.Request, client netip.Addr) (policy.Identity, string) {
	if ids == nil || ids.Len() == 0 {
		return anonymous, ""
	}
	if v := r.Header.Get("Proxy-Authorization"); v != "" {
		user, token, ok := parseBasic(v)
		if !ok {
			return policy.Identity{}, reasonAuthInvalid
		}
		id, ok := ids.Authenticate(user, token)
		if !ok {
			return policy.Identity{}, reasonAuthInvalid
		}
		return id, ""
	}
	if id, ok := ids.BySource(client); ok {
		return id, ""
	}
	return policy.Identity{}, reasonAuthRequired
}

// parseBasic decodes a "Basic base64(user:token)" credential.
func parseBasic(v string) (user, token string, ok bool) {
	const prefix = "Basic "
	if len(v) < len(prefix) || !strings.EqualFold(v[:len(prefix)], prefix) {
		return "", "", false
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v[len(prefix):]))
	if err != nil {
		return "", "", false
	}
	user, token, ok = strings.Cut(string(b), ":")
	if !ok {
		return "", "", false
	}
	return user, token, true
}
