package broker

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/egressd/egressd/policy"
)

// Marker starts a placeholder: the sandbox writes Marker+NAME where it
// would write the secret NAME, and egressd swaps it in the places the
// allowing rule's actions name.
const Marker = "egressd:secret:"

// findMarker returns the first placeholder-like text in s at or after
// from: "egressd", a separator, "secret", in any letter case and with the
// separators written as ':' or percent-encoded once or twice. Any of them
// is a placeholder a server might decode, so any of them refuses a
// request it is not swapped out of. start is -1 when there is none; name
// is the secret name that follows; exact says it is Marker itself, the
// only spelling that is swapped. It looks at each byte a bounded number of
// times.
func findMarker(s string, from int) (start int, name string, exact bool) {
	for i := from; i+len("egressd") <= len(s); i++ {
		if s[i] != 'e' && s[i] != 'E' {
			continue
		}
		if !strings.EqualFold(s[i:i+7], "egressd") {
			continue
		}
		j := i + 7
		n := sepLen(s[j:])
		if n == 0 {
			continue
		}
		j += n
		if len(s)-j < 6 || !strings.EqualFold(s[j:j+6], "secret") {
			continue
		}
		j += 6
		j += sepLen(s[j:])
		k := j
		for k < len(s) && k-j < 64 && policy.IsSecretNameByte(s[k]) {
			k++
		}
		return i, s[j:k], strings.HasPrefix(s[i:], Marker)
	}
	return -1, "", false
}

// markerAt is findMarker's start alone.
func markerAt(s string, from int) int {
	i, _, _ := findMarker(s, from)
	return i
}

// markerCount is how many markers s holds.
func markerCount(s string) int {
	n := 0
	for i := markerAt(s, 0); i >= 0; i = markerAt(s, i+1) {
		n++
	}
	return n
}

// sepLen is the length of the separator s starts with: ':' plain or
// percent-encoded once or twice; 0 if none.
func sepLen(s string) int {
	switch {
	case strings.HasPrefix(s, ":"):
		return 1
	case len(s) >= 3 && strings.EqualFold(s[:3], "%3a"):
		return 3
	case len(s) >= 5 && strings.EqualFold(s[:5], "%253a"):
		return 5
	}
	return 0
}

// Plan is the credential work for one request, decided before anything
// goes upstream: which actions apply, and what the audit record says.
type Plan struct {
	secrets *Secrets
	actions []policy.Credential
	apply   []bool
	// Applied maps each secret that goes upstream to where
	// ("header:Authorization", "query:key"; several joined by ","), for
	// the audit record. Nil when none does.
	Applied map[string]string
	// sc is the response scrubber, built once (scrubber).
	sc *Scrubber
}

// Prepare checks a request against the actions of the rule that allowed it
// (policy.Decision.Credentials) and the secrets in force. h is the request
// header as the sandbox sent it; rawPath and rawQuery its target. It
// returns nil and no reason for a request that neither has actions nor
// carries a placeholder, and a reason for a request that must be refused:
//
//   - policy.ReasonCredentialWrongDestination: a placeholder names a secret the
//     rule does not bind;
//   - policy.ReasonCredentialLiteral: a require action's place holds a
//     value without its placeholder;
//   - policy.ReasonCredentialUnresolved: a placeholder of a bound secret in
//     a place no action names, in another spelling than Marker, or of a
//     secret not loaded.
func Prepare(actions []policy.Credential, secrets *Secrets, h http.Header, rawPath, rawQuery string) (*Plan, policy.Reason) {
	if len(actions) == 0 && !mayHoldMarker(h, rawPath, rawQuery) {
		// Every request pays this scan; a request with nothing to do
		// leaves without allocating.
		return nil, ""
	}
	c := checker{actions: actions, secrets: secrets, found: make([]bool, len(actions))}
	c.scan(rawPath, "", "")
	if p, err := url.PathUnescape(rawPath); err == nil && p != rawPath {
		c.scan(p, "", "")
	}
	eachParam(rawQuery, func(q *param) {
		if !q.ok {
			// Undecodable: a server may read it some other way, so no
			// placeholder in it is swapped, and nothing in it is one.
			c.scan(q.raw, "", "")
			c.require(policy.PlaceQuery, q.key, "")
			return
		}
		c.scan(q.key, "", "")
		c.scan(q.value, policy.PlaceQuery, q.key)
		c.require(policy.PlaceQuery, q.key, q.value)
		// Decoding can hide a marker the raw bytes spell ("%0egressd%3A…":
		// "%0e" takes the "e"); a server that decodes otherwise would
		// see it, so a piece whose raw form holds more markers than its
		// decoded key and value is refused.
		if markerCount(q.raw) > markerCount(q.key)+markerCount(q.value) && c.reason == "" {
			c.reason = policy.ReasonCredentialUnresolved
		}
	})
	for k, vs := range h {
		c.scan(k, "", "")
		for _, v := range vs {
			c.scan(v, policy.PlaceHeader, k)
			c.require(policy.PlaceHeader, k, v)
		}
	}
	if c.reason != "" {
		return nil, c.reason
	}
	if len(actions) == 0 {
		return nil, ""
	}
	p := &Plan{secrets: secrets, actions: actions, apply: c.found}
	for i := range actions {
		a := &actions[i]
		if a.Sets() {
			if !secrets.Has(a.Secret) {
				return nil, policy.ReasonCredentialUnresolved
			}
			p.apply[i] = true
		}
		if !p.apply[i] {
			continue
		}
		if p.Applied == nil {
			p.Applied = make(map[string]string, len(actions))
		}
		kind, name := a.Place()
		where := kind + ":" + name
		if prev := p.Applied[a.Secret]; prev != "" {
			where = prev + "," + where
		}
		p.Applied[a.Secret] = where
	}
	return p, ""
}

// mayHoldMarker reports whether a placeholder could be in the request:
// one is written plainly, or percent-encoding in the path or query could
// spell one after decoding.
func mayHoldMarker(h http.Header, rawPath, rawQuery string) bool {
	if markerAt(rawPath, 0) >= 0 || markerAt(rawQuery, 0) >= 0 ||
		strings.IndexByte(rawPath, '%') >= 0 || strings.IndexByte(rawQuery, '%') >= 0 {
		return true
	}
	for k, vs := range h {
		if markerAt(k, 0) >= 0 {
			return true
		}
		for _, v := range vs {
			if markerAt(v, 0) >= 0 {
				return true
			}
		}
	}
	return false
}

// checker classifies the placeholders of one request.
type checker struct {
	actions []policy.Credential
	secrets *Secrets
	found   []bool
	reason  policy.Reason
}

// scan classifies every placeholder in s, found in place (kind, name); an
// empty kind is a place no action can name (the path, a header name).
func (c *checker) scan(s, kind, name string) {
	for i := 0; ; i++ {
		var secret string
		var exact bool
		if i, secret, exact = findMarker(s, i); i < 0 {
			return
		}
		if a := c.placeholderFor(kind, name, secret); exact && a >= 0 && c.secrets.Has(secret) {
			c.found[a] = true
			continue
		}
		if kind == policy.PlaceHeader && c.sets(name) && c.binds(secret) {
			// The header is set whole by an action: the sandbox's value,
			// placeholder and all, is dropped, so nothing of it remains.
			continue
		}
		c.fail(secret)
	}
}

// require refuses a value of a require action's place that lacks its
// placeholder.
func (c *checker) require(kind, name, value string) {
	for i := range c.actions {
		a := &c.actions[i]
		if !a.Require {
			continue
		}
		if k, n := a.Place(); k == kind && n == name && !strings.Contains(value, Marker+a.Secret) {
			if c.reason != policy.ReasonCredentialWrongDestination {
				c.reason = policy.ReasonCredentialLiteral
			}
		}
	}
}

func (c *checker) placeholderFor(kind, name, secret string) int {
	if kind == "" {
		return -1
	}
	for i := range c.actions {
		a := &c.actions[i]
		if a.Placeholder == "" || a.Secret != secret {
			continue
		}
		if k, n := a.Place(); k == kind && n == name {
			return i
		}
	}
	return -1
}

// fail records a placeholder that stays: of a secret the rule binds it is
// unresolved, of any other it is headed for the wrong destination, which
// outranks every other reason.
func (c *checker) fail(secret string) {
	if !c.binds(secret) {
		c.reason = policy.ReasonCredentialWrongDestination
		return
	}
	if c.reason == "" {
		c.reason = policy.ReasonCredentialUnresolved
	}
}

// binds reports whether an action of the rule names secret.
func (c *checker) binds(secret string) bool {
	for i := range c.actions {
		if c.actions[i].Secret == secret {
			return true
		}
	}
	return false
}

// sets reports whether an action sets header name whole.
func (c *checker) sets(name string) bool {
	for i := range c.actions {
		if k, n := c.actions[i].Place(); c.actions[i].Sets() && k == policy.PlaceHeader && n == name {
			return true
		}
	}
	return false
}

// param is one '&'-separated piece of a raw query.
type param struct {
	raw        string // the piece as sent
	rawKey     string
	eq         bool // the piece has '='
	key, value string
	// ok says key and value decoded; when false the value is raw, and so
	// is the key if it does not decode.
	ok bool
}

// eachParam calls fn for each '&'-separated piece of a raw query, empty
// ones included, so that a rebuilt query keeps the bytes of the pieces it
// does not change.
func eachParam(rawQuery string, fn func(p *param)) {
	if rawQuery == "" {
		return
	}
	for {
		piece, rest, more := strings.Cut(rawQuery, "&")
		rk, rv, eq := strings.Cut(piece, "=")
		p := param{raw: piece, rawKey: rk, eq: eq, key: rk, value: rv}
		k, err1 := url.QueryUnescape(rk)
		v, err2 := url.QueryUnescape(rv)
		if err1 == nil {
			// Decoded even when the value is not, so that a require
			// action still knows its place.
			p.key = k
		}
		if err1 == nil && err2 == nil {
			p.value, p.ok = v, true
		}
		fn(&p)
		if !more {
			return
		}
		rawQuery = rest
	}
}
