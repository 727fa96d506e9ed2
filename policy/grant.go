package policy

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gobwas/glob"
)

// GrantRulePrefix starts the rule id of every grant ("grant:<id>"): a
// decision naming such a rule was made by a grant, and a bundle rule may
// not use the prefix.
const GrantRulePrefix = "grant:"

// Grant is a time-bound allow for one identity, written by `egressd grant`
// (an operator or an approval service) rather than by the bundle's author.
// It is data, not Rego: the engine appends it to data.rules as an allow
// rule (Rule) and compiles and tests the bundle with it exactly as with
// its own rules, so a grant is validated like any rule, the bundle's Rego
// tests still run over it, and, being a rule, it never reaches past the
// address floor, the request facts the base rules refuse, or a deny rule.
// The JSON form is the grants file's and the admin API's.
type Grant struct {
	// ID names the grant; its rule is GrantRulePrefix+ID.
	ID string `json:"id"`
	// Identity is the one identity the grant allows.
	Identity string `json:"identity"`
	// Method and Path are the one request line the grant allows; Path is
	// the decoded path (what rules match) and is matched literally, never
	// as a glob. Both are empty on a tunnel grant.
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
	// Host (a lower-case name or a canonical IP, never a wildcard or
	// CIDR) and Port are the destination.
	Host string `json:"host"`
	Port int    `json:"port"`
	// Inspect marks an https request line: its CONNECT must be terminated
	// for the method and path to be decided, as a path rule on HTTPS
	// needs.
	Inspect bool `json:"inspect,omitempty"`
	// Tunnel makes the grant host-wide for the identity, host and port:
	// it opens an opaque CONNECT tunnel and allows every request there.
	// Only an explicit request sets it.
	Tunnel bool `json:"tunnel,omitempty"`
	// Expires is when the grant stops allowing.
	Expires time.Time `json:"expires"`
	// GrantedBy is the authenticated admin client that created it.
	GrantedBy string `json:"granted_by"`
	// FromRequest is the denied request it was made from, if any.
	FromRequest string `json:"from_request,omitempty"`
	// Created is when it was made.
	Created time.Time `json:"created"`
}

// RuleID is the id of the grant's rule in data.rules and in decisions.
func (g *Grant) RuleID() string { return GrantRulePrefix + g.ID }

// Validate checks g without I/O; errors name the field as the API spells
// it.
func (g *Grant) Validate() error {
	if g.ID == "" || strings.ContainsFunc(g.ID, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-'
	}) {
		return fmt.Errorf("id must be lower-case letters, digits and '-', got %q", g.ID)
	}
	if g.Identity == "" {
		return fmt.Errorf("identity is required (grant %s)", g.ID)
	}
	if strings.HasPrefix(g.Host, "*.") || strings.Contains(g.Host, "/") {
		return fmt.Errorf("host must be one name or IP, not a wildcard or CIDR, got %q (grant %s)", g.Host, g.ID)
	}
	if err := validateRuleHost(g.Host); err != nil {
		return fmt.Errorf("host %w (grant %s)", err, g.ID)
	}
	if g.Port < 1 || g.Port > 65535 {
		return fmt.Errorf("port must be 1-65535, got %d (grant %s)", g.Port, g.ID)
	}
	if g.Tunnel {
		if g.Method != "" || g.Path != "" || g.Inspect {
			return fmt.Errorf("a tunnel grant is host-wide: it takes no method, path or inspect (grant %s)", g.ID)
		}
	} else {
		if !isToken(g.Method) || strings.ToUpper(g.Method) != g.Method {
			return fmt.Errorf("method must be an upper-case HTTP method, got %q (grant %s)", g.Method, g.ID)
		}
		if !strings.HasPrefix(g.Path, "/") || strings.ContainsFunc(g.Path, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return fmt.Errorf("path must be a decoded path starting with \"/\" without control characters, got %q (grant %s)", g.Path, g.ID)
		}
	}
	if g.Expires.IsZero() {
		return fmt.Errorf("expires is required (grant %s)", g.ID)
	}
	return nil
}

// GrantFor is a request-line grant for identity on the URL facts of a
// request (ParseHTTP), or an error saying why that request cannot be
// granted: a request whose facts the base rules refuse (an encoded
// separator, a dot segment …) is refused whatever a rule says.
func GrantFor(identity, method string, f *URLFacts) (Grant, error) {
	if f.PathFlags != 0 || f.Userinfo || f.HostMismatch || f.IPObfuscated {
		return Grant{}, fmt.Errorf("the request's own facts refuse it whatever a rule allows (%s): no grant can lift that", f.refusedFacts())
	}
	return Grant{Identity: identity, Method: method, Host: f.Host, Port: int(f.Port), Path: f.PathDecoded,
		Inspect: f.Scheme == "https"}, nil
}

func (f *URLFacts) refusedFacts() string {
	var s []string
	if f.PathFlags != 0 {
		s = append(s, f.PathFlags.String())
	}
	if f.Userinfo {
		s = append(s, "userinfo")
	}
	if f.HostMismatch {
		s = append(s, "host_mismatch")
	}
	if f.IPObfuscated {
		s = append(s, "ip_obfuscated")
	}
	return strings.Join(s, ",")
}

// rule is g as a data.rules entry (decoded JSON, as parseBundle holds
// data): an allow rule for exactly g's identity, host and port, and,
// unless g is a tunnel grant, its method and its path as a glob that
// matches that path alone.
func (g *Grant) rule() map[string]any {
	r := map[string]any{
		"id":         g.RuleID(),
		"hosts":      []any{g.Host},
		"ports":      []any{json.Number(strconv.Itoa(g.Port))},
		"identities": []any{g.Identity},
		"comment":    fmt.Sprintf("granted by %s until %s", g.GrantedBy, g.Expires.UTC().Format(time.RFC3339)),
	}
	if !g.Tunnel {
		r["methods"] = []any{g.Method}
		// Escaped: "*", "?", "[" and "{" in a request path are literal.
		r["paths"] = []any{glob.QuoteMeta(g.Path)}
		if g.Inspect {
			r["inspect"] = true
		}
	}
	return r
}

// checkGrantPrefix refuses a bundle rule whose id uses GrantRulePrefix: a
// decision naming one must have come from a grant.
func checkGrantPrefix(root map[string]any) error {
	list, _ := root["rules"].([]any)
	for i, r := range list {
		if obj, ok := r.(map[string]any); ok {
			if id, ok := obj["id"].(string); ok && strings.HasPrefix(id, GrantRulePrefix) {
				return fmt.Errorf("rules[%d].id %q: the prefix %q is reserved for grants: rename the rule", i, id, GrantRulePrefix)
			}
		}
	}
	return nil
}

// appendGrants appends the grants' rules to root's data.rules, after the
// bundle's own: a bundle rule that allows the same request decides it.
func appendGrants(root map[string]any, grants []Grant) error {
	if len(grants) == 0 {
		return nil
	}
	list, ok := root["rules"].([]any)
	if !ok && root["rules"] != nil {
		return nil // not a list: buildIndex names the mistake
	}
	for i := range grants {
		if err := grants[i].Validate(); err != nil {
			return fmt.Errorf("grant: %w", err)
		}
		list = append(list, grants[i].rule())
	}
	root["rules"] = list
	return nil
}
