package audit

import (
	"strings"

	"github.com/egressd/egressd/policy"
)

// Kind is the kind of a record: the entry point that decided ("http",
// "connect", "dns", "sql", "redirect", "accept"), a completion of an
// allowed request ("http_done", "connect_done"), or a record the writer
// itself adds ("segment", "checkpoint", …). Its string is the record's
// "kind" field on disk, so a constant's value never changes.
type Kind string

// Kinds of decision records; the first five are policy.Kind's names.
const (
	KindHTTP     Kind = "http"
	KindConnect  Kind = "connect"
	KindDNS      Kind = "dns"
	KindSQL      Kind = "sql"
	KindRedirect Kind = "redirect"
	// KindAccept is a connection refused on accept, before any request
	// was read (internal/fdlimit): Detail "listener".
	KindAccept Kind = "accept"
)

// Kinds of completion records: they end a request whose allow is already
// in the log, with its status, bytes and duration.
const (
	KindHTTPDone    Kind = "http_done"
	KindConnectDone Kind = "connect_done"
)

func (k Kind) String() string { return string(k) }

// kinds is every kind egressd writes, in the order help lists them.
var kinds = []Kind{KindHTTP, KindConnect, KindDNS, KindSQL, KindRedirect, KindAccept,
	KindHTTPDone, KindConnectDone, KindGrant,
	KindSegment, KindCheckpoint, KindResumed, KindAcceptedBreak, KindStarted}

// Kinds returns every kind a record can have, decision kinds first; a
// new kind is added here so that readers (`audit show --kind`) know it.
func Kinds() []Kind { return append([]Kind(nil), kinds...) }

// IsCompletion reports whether k is a completion record ("http_done",
// "connect_done", …), which ends a request that was allowed.
func (k Kind) IsCompletion() bool { return strings.HasSuffix(string(k), "_done") }

// Decision is a record's verdict; its string is the "decision" field on
// disk. Writer records carry none (the empty Decision).
type Decision string

// The two verdicts.
const (
	DecisionAllow Decision = "allow"
	DecisionDeny  Decision = "deny"
)

// DecisionOf is the verdict allow stands for.
func DecisionOf(allow bool) Decision {
	if allow {
		return DecisionAllow
	}
	return DecisionDeny
}

func (d Decision) String() string { return string(d) }

// Verdict is what a decider answered, as the record carries it.
type Verdict struct {
	Allow bool
	// Reason is set on every deny.
	Reason policy.Reason
	// Rule is the id of the rule that decided, empty when none matched.
	Rule string
	// Policy is the digest of the bundle that decided.
	Policy string
	// WouldDeny and ObservedBy are set on an allow an observe mode let
	// through (policy.Decision.WouldDeny): the reason it would have been
	// denied with, and whose mode. Zero otherwise.
	WouldDeny  policy.Reason
	ObservedBy policy.ObservedBy
}

// VerdictOf is the verdict of decision d: the one place a decision's
// fields become a record's.
func VerdictOf(d policy.Decision) Verdict {
	v := Verdict{Allow: d.Allow, Reason: d.Reason, Rule: d.Rule, Policy: d.Policy}
	if w := d.WouldDeny; w != nil && d.Allow {
		v.WouldDeny, v.ObservedBy = w.Reason, w.By
	}
	return v
}

// Decided is the record of one decision: what kind, who asked (identity
// and client address, either may be empty when unknown) and the verdict.
// Every entry point builds its decision records here, so the verdict
// fields are spelled the same way for HTTP, CONNECT, DNS and SQL; the
// caller adds its target fields.
func Decided(kind Kind, identity, client string, v Verdict) *Record {
	r := &Record{Kind: kind, Identity: identity, Client: client}
	r.SetVerdict(v)
	return r
}

// SetVerdict sets r's decision, reason, rule, policy and would_deny to
// v's, for a record built before the decision was known.
func (r *Record) SetVerdict(v Verdict) {
	r.Decision = DecisionOf(v.Allow)
	r.Reason, r.Rule, r.Policy = v.Reason.String(), v.Rule, v.Policy
	r.WouldDeny, r.ObservedBy = "", ""
	if v.Allow && v.WouldDeny != "" {
		r.WouldDeny, r.ObservedBy = v.WouldDeny.String(), v.ObservedBy.String()
	}
}
