// Package policy owns every egress decision: it loads a Rego bundle, compiles
// one prepared query per entry point, turns requests into input facts, and
// answers Decide with an allow/deny, a stable reason and the rule that matched.
// It fails closed: anything it cannot evaluate is a deny that says why.
package policy

import (
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Kind names a policy entry point and the kind of audit record a decision
// produces.
type Kind uint8

// The entry points. KindRedirect is decided by the http package with
// input.kind = "redirect", so a redirect is judged by the same rules as the
// request it replaces.
const (
	KindHTTP Kind = iota + 1
	KindConnect
	KindDNS
	KindSQL
	KindRedirect
)

var kindNames = [...]string{"", "http", "connect", "dns", "sql", "redirect"}

func (k Kind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Identity is the authenticated sandbox a request comes from. It reaches
// Rego as input.identity.
type Identity struct {
	// ID is the sandbox id; empty means anonymous.
	ID string `json:"id"`
	// Attributes are operator-assigned labels (team, sql profile, …). Nil
	// means none.
	Attributes map[string]string `json:"attributes,omitempty"`
	// Mode is the identity's `mode:`; ModeObserve lets its liftable
	// denies through as would_deny. Rego does not see it.
	Mode Mode `json:"-"`
}

// Facts are the Go-computed facts one entry point decides on. Implementations
// live beside their parsers (URL facts here, SQL facts in policy/sqlfacts).
type Facts interface {
	// Kind selects the entry point.
	Kind() Kind
	// AppendKey appends bytes that identify the facts completely: two facts
	// with equal keys must get equal decisions. It is the decision cache key.
	AppendKey(dst []byte) []byte
	// AddTo inserts the facts' fields into the Rego input object.
	AddTo(input ast.Object)
}

// Input is the argument of Decide. It is a struct so that adding a field
// never breaks a caller.
type Input struct {
	Identity Identity
	Facts    Facts
}

// Decision is the answer of an entry point.
type Decision struct {
	Allow bool `json:"allow"`
	// Reason is set on every deny and may be set on an allow
	// (ReasonAllowed, the bundle's).
	Reason Reason `json:"reason"`
	// Rule is the id of the rule that decided, empty when none matched.
	Rule string `json:"rule"`
	// Policy is the digest of the bundle that decided.
	Policy string `json:"policy"`
	// TLS is set on an allowed CONNECT whose rule requires TLS inside the
	// tunnel (a rule's "tls", true by default on every port): the proxy
	// must close a tunnel whose first client bytes are not a TLS handshake
	// record. False on every other decision.
	TLS bool `json:"tls,omitempty"`
	// Credentials are the credential actions of the rule that allowed an
	// http request (data.rules[i].credentials): secret names and places,
	// never values. Nil on denies, on other kinds and for rules without.
	// Shared by every decision of the rule: read only.
	Credentials []Credential `json:"credentials,omitempty"`
	// Options are the deciding rule's body, size, MCP and model keys
	// (data.rules[i]), looked up like Credentials: on a refusal of a
	// body, they say which calls were refused. Nil on other kinds, when
	// no rule decided and for rules without any.
	Options *RuleOptions `json:"options,omitempty"`
	// Inspect is set on an allowed CONNECT whose rule asks for inspection
	// (a rule's "inspect"): the proxy terminates the tunnel's TLS with a
	// leaf of the identity's own CA and decides every request inside with
	// the http entry point. False on every other decision.
	Inspect bool `json:"inspect,omitempty"`
	// ReadOnly is set on an allowed SQL "connect" whose profile may write
	// nothing: the Postgres gate starts the upstream session with
	// default_transaction_read_only on, so that PostgreSQL refuses a write
	// too. False on every other decision.
	ReadOnly bool `json:"read_only,omitempty"`
	// WouldDeny is set on an allow that was a deny an observe mode (of
	// the rule, the identity or the bundle) let through: the reason it
	// would have been denied with, and which mode. Rule still names the
	// rule that decided. Nil on every other decision; shared by every
	// decision of the cache entry: read only.
	WouldDeny *Observed `json:"would_deny,omitempty"`
}

// DenyError is the one typed error for a refusal found outside Rego (a
// malformed URL, a forbidden address, an unavailable audit log). Callers map
// it to a client response with errors.As in exactly one place.
type DenyError struct {
	// Reason is the stable snake_case reason, one of the declared Reason
	// constants (ReasonMetadataAddress, …).
	Reason Reason
	// Detail says what was refused, for the operator; it is not sent to
	// clients when it could reveal internal addresses.
	Detail string
	// Err is the underlying cause, if any.
	Err error
}

func (e *DenyError) Error() string {
	switch {
	case e.Detail != "" && e.Err != nil:
		return fmt.Sprintf("denied: %s: %s: %v", e.Reason, e.Detail, e.Err)
	case e.Detail != "":
		return fmt.Sprintf("denied: %s: %s", e.Reason, e.Detail)
	case e.Err != nil:
		return fmt.Sprintf("denied: %s: %v", e.Reason, e.Err)
	}
	return "denied: " + e.Reason.String()
}

func (e *DenyError) Unwrap() error { return e.Err }
