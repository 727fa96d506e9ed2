package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Credential is one credential action of a rule (data.rules[i].credentials):
// the proxy adds the named secret to the requests the rule allows, so the
// sandbox never holds it. Exactly one of Header, Basic and Placeholder is
// set. It names a secret and a place, never a value: secrets live in the
// config's secrets: section, not in policy data, so this is safe to print
// (`egressd check http`) and to log.
type Credential struct {
	// Secret is the name of a secrets: entry.
	Secret string `json:"secret"`
	// Header is set to Format with "{}" replaced by the secret; the
	// sandbox's own values of the header are dropped.
	Header string `json:"header,omitempty"`
	// Format is the header value template. If empty, "{}" is used.
	Format string `json:"format,omitempty"`
	// Basic sets Authorization to HTTP Basic with the secret as password.
	Basic *BasicAuth `json:"basic,omitempty"`
	// Placeholder is "header:NAME" or "query:NAME": the one place where the
	// sandbox's egressd:secret:SECRET is swapped for the value.
	Placeholder string `json:"placeholder,omitempty"`
	// Require refuses a request whose placeholder place holds a value
	// without the placeholder: a literal key the sandbox brought.
	Require bool `json:"require,omitempty"`
	// AllowRange lets the rule's requests carry Range and If-Range
	// (resumable downloads). Without it they are refused: pieces of an
	// echo, each scrubbed alone, can together spell the secret.
	AllowRange bool `json:"allow_range,omitempty"`
}

// BasicAuth is the user of a Basic credential.
type BasicAuth struct {
	User string `json:"user"`
}

// PlaceHeader and PlaceQuery are the kinds of place a credential sets or
// swaps in.
const (
	PlaceHeader = "header"
	PlaceQuery  = "query"
)

// Place says where the action puts the secret: ("header", canonical name)
// or ("query", parameter name).
func (c *Credential) Place() (kind, name string) {
	switch {
	case c.Header != "":
		return PlaceHeader, http.CanonicalHeaderKey(c.Header)
	case c.Basic != nil:
		return PlaceHeader, "Authorization"
	}
	kind, name, _ = strings.Cut(c.Placeholder, ":")
	if kind == PlaceHeader {
		name = http.CanonicalHeaderKey(name)
	}
	return kind, name
}

// Sets reports whether the action sets its header whatever the request
// holds (header template, Basic), rather than swapping a placeholder.
func (c *Credential) Sets() bool { return c.Placeholder == "" }

// CredentialRule is a rule that binds credentials, as the load-time checks
// need it: where its secrets may go.
type CredentialRule struct {
	// Index is the rule's position in data.rules.
	Index int
	ID    string
	Hosts []string
	Ports []int
	// Inspect is the rule's "inspect" key: its HTTPS requests are
	// terminated, so a secret added to them travels inside TLS.
	Inspect     bool
	Credentials []Credential
}

// credentialRuleSpec reads what the credential checks need of a rule; the
// rule's full shape is checked by buildIndex.
type credentialRuleSpec struct {
	ID          string            `json:"id"`
	Hosts       []string          `json:"hosts"`
	Ports       []int             `json:"ports"`
	Action      string            `json:"action"`
	Inspect     bool              `json:"inspect"`
	Credentials []json.RawMessage `json:"credentials"`
}

// parseCredentials validates the credentials of data.rules (already shape
// checked by buildIndex) and returns the rules that bind any, and their
// actions by rule id.
func parseCredentials(raw any) ([]CredentialRule, map[string][]Credential, error) {
	if raw == nil {
		return nil, nil, nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("rules: %w", err)
	}
	var specs []credentialRuleSpec
	if err := json.Unmarshal(b, &specs); err != nil {
		return nil, nil, fmt.Errorf("rules: %w", err)
	}
	var rules []CredentialRule
	byID := map[string][]Credential{}
	for i, s := range specs {
		if len(s.Credentials) == 0 {
			continue
		}
		if s.Action == "deny" {
			return nil, nil, fmt.Errorf("rules[%d].credentials: a deny rule sends nothing upstream; move the credentials to the rule that allows (rule %q)", i, s.ID)
		}
		cs := make([]Credential, len(s.Credentials))
		for j, rc := range s.Credentials {
			dec := json.NewDecoder(bytes.NewReader(rc))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&cs[j]); err != nil {
				return nil, nil, fmt.Errorf("rules[%d].credentials[%d]: %w (rule %q)", i, j, err, s.ID)
			}
			if err := cs[j].validate(); err != nil {
				return nil, nil, fmt.Errorf("rules[%d].credentials[%d].%w (rule %q)", i, j, err, s.ID)
			}
		}
		if err := checkPlaces(cs); err != nil {
			return nil, nil, fmt.Errorf("rules[%d].credentials%w (rule %q)", i, err, s.ID)
		}
		byID[s.ID] = cs
		rules = append(rules, CredentialRule{Index: i, ID: s.ID, Hosts: s.Hosts, Ports: s.Ports, Inspect: s.Inspect, Credentials: cs})
	}
	return rules, byID, nil
}

// checkPlaces refuses two actions on one place: a header set twice, or a
// placeholder in a header another action sets (the set would drop it).
func checkPlaces(cs []Credential) error {
	seen := map[string]int{}
	for j := range cs {
		kind, name := cs[j].Place()
		key := kind + ":" + name
		if kind == PlaceQuery {
			key += "\x00" + cs[j].Secret
		}
		if k, dup := seen[key]; dup && (cs[j].Sets() || cs[k].Sets() || kind == PlaceQuery) {
			return fmt.Errorf("[%d] acts on %s %q like credentials[%d]: one action per place", j, kind, name, k)
		}
		seen[key] = j
	}
	return nil
}

// forbiddenCredentialHeaders are headers the proxy owns: framing, routing
// and hop-by-hop headers, which a secret must never replace.
var forbiddenCredentialHeaders = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true,
	"Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authorization": true, "Proxy-Authenticate": true,
	"Te": true, "Trailer": true, "Upgrade": true, "Content-Encoding": true, "Expect": true,
}

func (c *Credential) validate() error {
	if !IsSecretName(c.Secret) {
		return fmt.Errorf("secret must be a secret name (letters, digits, '_' or '-', at most 64), got %q", c.Secret)
	}
	forms := 0
	for _, set := range []bool{c.Header != "", c.Basic != nil, c.Placeholder != ""} {
		if set {
			forms++
		}
	}
	if forms != 1 {
		return fmt.Errorf("secret %q: set exactly one of header, basic and placeholder", c.Secret)
	}
	if c.Format != "" && c.Header == "" {
		return fmt.Errorf("format is only for a header action")
	}
	if c.Require && c.Placeholder == "" {
		return fmt.Errorf("require is only for a placeholder action: header and basic actions always replace the sandbox's value")
	}
	switch {
	case c.Header != "":
		if err := checkHeaderName(c.Header); err != nil {
			return fmt.Errorf("header %w", err)
		}
		f := c.Format
		if f == "" {
			f = "{}"
		}
		if strings.Count(f, "{}") != 1 || !printable(f) {
			return fmt.Errorf("format must hold \"{}\" exactly once and printable ASCII only, got %q", c.Format)
		}
	case c.Basic != nil:
		if strings.Contains(c.Basic.User, ":") || !printable(c.Basic.User) {
			return fmt.Errorf("basic.user must be printable ASCII without ':', got %q", c.Basic.User)
		}
	default:
		kind, name, ok := strings.Cut(c.Placeholder, ":")
		switch {
		case ok && kind == PlaceHeader:
			if err := checkHeaderName(name); err != nil {
				return fmt.Errorf("placeholder header %w", err)
			}
		case ok && kind == PlaceQuery:
			if name == "" || strings.ContainsAny(name, "&=#;") || !printable(name) {
				return fmt.Errorf("placeholder query parameter must be a plain name, got %q", name)
			}
		default:
			return fmt.Errorf("placeholder must be \"header:NAME\" or \"query:NAME\", got %q", c.Placeholder)
		}
	}
	return nil
}

func checkHeaderName(h string) error {
	if h == "" || !isToken(h) {
		return fmt.Errorf("must be a header name, got %q", h)
	}
	if forbiddenCredentialHeaders[http.CanonicalHeaderKey(h)] {
		return fmt.Errorf("%q is the proxy's own: it cannot carry a secret", h)
	}
	return nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// IsSecretName reports a valid secret name: 1-64 letters, digits, '_' or
// '-'. Placeholders end where the name's characters do.
func IsSecretName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !IsSecretNameByte(s[i]) {
			return false
		}
	}
	return true
}

// IsSecretNameByte reports a byte a secret name may hold.
func IsSecretNameByte(c byte) bool {
	return c == '_' || c == '-' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// CredentialRules lists the bundle's rules that bind credentials, for the
// checks that need the config too (secret names, internal:).
func (e *Engine) CredentialRules() []CredentialRule { return e.cur.credentialRules }
