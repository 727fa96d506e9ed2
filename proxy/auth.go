package proxy

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/netip"
	"strings"

	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/policy"
)

// credential is how a client proved its identity, kept so that a reload can
// ask again: the SHA-256 of its Basic token (never the token), or its
// source address.
type credential struct {
	tokenSum [sha256.Size]byte
	basic    bool
	source   netip.Addr
	// user is the name the client claimed, kept for the audit record of
	// a refusal (the token never is).
	user string
}

// authenticate names the client of r: Basic credentials when sent, else a
// source-CIDR mapping, else anonymous when the table is empty. A missing or
// wrong credential is a refusal with reason proxy_auth_required or
// proxy_auth_invalid; wrong credentials never fall back to the source
// mapping, so a mapped address cannot mask a guessing client.
func authenticate(ids *identity.Store, r *http.Request, client netip.Addr) (policy.Identity, credential, policy.Reason) {
	cred := credential{source: client}
	if ids.AllAnonymous() {
		return identity.Anonymous, cred, ""
	}
	if v := r.Header.Get("Proxy-Authorization"); v != "" {
		user, token, ok := parseBasic(v)
		if !ok {
			return policy.Identity{}, cred, policy.ReasonProxyAuthInvalid
		}
		cred.tokenSum, cred.basic, cred.user = sha256.Sum256([]byte(token)), true, user
		id, ok := ids.AuthenticateSum(user, cred.tokenSum)
		if !ok {
			return policy.Identity{}, cred, policy.ReasonProxyAuthInvalid
		}
		return id, cred, ""
	}
	return reauthenticate(ids, identity.Anonymous.ID, cred)
}

// reauthenticate answers authenticate again for a client that proved it was
// id with cred, against ids (after a reload): a removed identity, a rotated
// token or a source now mapped elsewhere is refused.
func reauthenticate(ids *identity.Store, id string, cred credential) (policy.Identity, credential, policy.Reason) {
	switch {
	case ids.AllAnonymous():
		return identity.Anonymous, cred, ""
	case cred.basic:
		if nid, ok := ids.AuthenticateSum(id, cred.tokenSum); ok {
			return nid, cred, ""
		}
		return policy.Identity{}, cred, policy.ReasonIdentityRevoked
	}
	if nid, ok := ids.BySource(cred.source); ok && (id == identity.Anonymous.ID || nid.ID == id) {
		return nid, cred, ""
	}
	if id == identity.Anonymous.ID {
		return policy.Identity{}, cred, policy.ReasonProxyAuthRequired
	}
	return policy.Identity{}, cred, policy.ReasonIdentityRevoked
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
