package policy

import (
	"fmt"
	"net/http"
	"sort"

	"github.com/miekg/dns"
	"github.com/open-policy-agent/opa/v1/ast"
)

// Reason is a stable snake_case deny reason. It appears identically in
// responses, audit records and metrics. The reasons Go code decides are
// declared below, once; Rego may return others (write_denied, …), which
// are of ClassPolicy.
type Reason string

func (r Reason) String() string { return string(r) }

// ReasonAllowed is the reason of every allow the bundle gives (a rule's
// view and base.allow carry it). It refuses nothing, so it has no class and
// is not in the reason table.
const ReasonAllowed Reason = "allowed"

// Class groups reasons by what a client can do about them; it chooses the
// HTTP status, DNS rcode and SQLSTATE of a refusal.
type Class uint8

// The classes.
const (
	// ClassPolicy: the policy or the address floor refused the destination.
	ClassPolicy Class = iota
	// ClassIdentity: the client did not prove who it is.
	ClassIdentity
	// ClassMalformed: the client's bytes could not be read exactly.
	ClassMalformed
	// ClassLimit: a rate, count or size bound was reached; later may work.
	ClassLimit
	// ClassUpstream: the destination or its name failed, not the request.
	ClassUpstream
	// ClassUnavailable: egressd itself cannot decide or record right now.
	ClassUnavailable
	// ClassClient: the client went away; nothing was refused.
	ClassClient
	numClasses
)

var classNames = [numClasses]string{"policy", "identity", "malformed", "limit", "upstream", "unavailable", "client"}

func (c Class) String() string {
	if c < numClasses {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// Codes is how each protocol says a refusal.
type Codes struct {
	// HTTP is the response status. ClassPolicy and ClassMalformed are
	// both refusals of the request: the proxy answers 400 when the request
	// could not be read and 403 once it was (see proxy.refusalFor).
	HTTP int
	// Rcode is the DNS answer code. RcodeRefused is answered as the DNS
	// server's configured refusal (REFUSED, or NXDOMAIN).
	Rcode int
	// SQLState is the code of an ErrorResponse that refuses a login or ends
	// a session. A denied statement is always 42501: the session stays
	// usable and the upstream raises that code itself.
	SQLState string
}

// SQLSTATEs the table uses.
const (
	sqlInsufficientPrivilege = "42501"
	sqlInvalidPassword       = "28P01"
	sqlInvalidAuthorization  = "28000"
	sqlRejectedConnection    = "08004"
	sqlTooManyConnections    = "53300"
	sqlCannotConnect         = "08001"
	sqlConnectionFailure     = "08006"
)

// classCodes is the one table from a class to each protocol's code.
var classCodes = [numClasses]Codes{
	ClassPolicy:    {http.StatusForbidden, dns.RcodeRefused, sqlInsufficientPrivilege},
	ClassIdentity:  {http.StatusProxyAuthRequired, dns.RcodeRefused, sqlInvalidPassword},
	ClassMalformed: {http.StatusBadRequest, dns.RcodeRefused, sqlRejectedConnection},
	ClassLimit:     {http.StatusTooManyRequests, dns.RcodeRefused, sqlTooManyConnections},
	ClassUpstream:  {http.StatusBadGateway, dns.RcodeServerFailure, sqlCannotConnect},
	// An unavailable audit log refuses a login like a policy deny: the
	// gate has always answered it 42501.
	ClassUnavailable: {http.StatusServiceUnavailable, dns.RcodeRefused, sqlInsufficientPrivilege},
	ClassClient:      {http.StatusBadGateway, dns.RcodeRefused, sqlConnectionFailure},
}

// Codes is how each protocol refuses with a reason of class c that has no
// codes of its own.
func (c Class) Codes() Codes {
	if c < numClasses {
		return classCodes[c]
	}
	return classCodes[ClassPolicy]
}

// Class is r's class; a reason Go does not declare (one of Rego's) is
// ClassPolicy.
func (r Reason) Class() Class {
	if e, ok := reasonTable[r]; ok {
		return e.class
	}
	return ClassPolicy
}

// Codes is how each protocol refuses with r: its class's codes, with the
// few overrides reasonTable gives.
func (r Reason) Codes() Codes {
	e, ok := reasonTable[r]
	if !ok {
		return classCodes[ClassPolicy]
	}
	c := classCodes[e.class]
	if e.http != 0 {
		c.HTTP = e.http
	}
	if e.rcode != nil {
		c.Rcode = *e.rcode
	}
	if e.sqlState != "" {
		c.SQLState = e.sqlState
	}
	return c
}

// Kinds is a set of entry points.
type Kinds uint8

// Has reports whether k is in s.
func (s Kinds) Has(k Kind) bool { return k < 8 && s&(1<<k) != 0 }

// Refuses reports whether a decision of entry point k can be denied with
// r. False for a reason only the bundle spells: those are counted where
// they occur, not foreseen.
func (r Reason) Refuses(k Kind) bool { return reasonTable[r].refuses.Has(k) }

// Ends reports whether an allowed request of entry point k can end denied
// with r: its completion record (http_done, connect_done) carries r.
func (r Reason) Ends(k Kind) bool { return reasonTable[r].ends.Has(k) }

// Liftable reports whether r is a rule's decision, which observe mode may
// let through (recorded as would_deny) and a grant may lift. A reason only
// the bundle spells is a rule's, except the request facts the bundle
// refuses on (path flags, ip_obfuscated, userinfo): those, like the
// address floor, malformed requests, secrets leaving and failures of the
// audit log or the engine, protect the box and are never lifted.
func (r Reason) Liftable() bool {
	if e, ok := reasonTable[r]; ok {
		return e.liftable
	}
	return !factRefusals[r]
}

// factRefusals are the undeclared reasons the bundle's base rules refuse
// with: the names of the request facts in input.flags.
var factRefusals = func() map[Reason]bool {
	m := map[Reason]bool{Reason(termObfuscated.Value.(ast.String)): true, Reason(termUserinfo.Value.(ast.String)): true}
	for _, n := range flagNames {
		m[Reason(n)] = true
	}
	return m
}()

// Declared reports whether Go code declares r (as opposed to a reason only
// the Rego bundle spells).
func (r Reason) Declared() bool {
	_, ok := reasonTable[r]
	return ok
}

// Reasons lists every declared reason, sorted.
func Reasons() []Reason {
	out := make([]Reason, 0, len(reasonTable))
	for r := range reasonTable {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Deny builds a deny decision with a reason.
func Deny(reason Reason, rule string) Decision {
	return Decision{Reason: reason, Rule: rule}
}
