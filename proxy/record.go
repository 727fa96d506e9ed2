package proxy

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/broker"
)

// flowInfo is what every audit record of one request or tunnel shares.
type flowInfo struct {
	id       string
	kind     policy.Kind
	identity string
	client   netip.Addr
	clientS  string // client.String(), formatted once for every record
	method   string
	target   Target
	start    time.Time

	// user is the name a client claimed in credentials that did not
	// authenticate it; only refusals for that carry it.
	user string
	// credentials are the secrets the proxy adds to the request and where
	// (names and places, never values), for its decision record.
	credentials map[string]string
	// inspected marks a request inside an inspected tunnel, and that
	// tunnel.
	inspected bool
	// notes are what the request's body said (MCP calls, the model),
	// when a rule read it; nil otherwise.
	notes *bodyNotes
	// scrub, when not nil, is the scrubber of a flow whose rule binds
	// secrets: every record of the flow passes through it (appendFlow).
	scrub *broker.Scrubber
	// leak, when not nil, is what the search for secrets leaving in the
	// request found (leak.go); nil when nothing is searched.
	leak *leakFindings
	// traceparent is the W3C trace context the client sent, when valid
	// (traceparentOf); every record of the flow carries it.
	traceparent string
	// via is how the flow's client reached egressd (audit.ViaProxy,
	// ViaTransparent, ViaSOCKS), for every record of the flow.
	via string
}

// recordPool recycles the records the proxy builds per request: every
// audit.Appender copies the record it is given, so one can be reused once
// Append returns. Two 680-byte records per keep-alive GET were a sixth of
// the proxy's allocation, and so of its GC cycles (issue 28).
var recordPool = sync.Pool{New: func() any { return new(audit.Record) }}

// pooledRecord is a zero record from recordPool.
func pooledRecord() *audit.Record { return recordPool.Get().(*audit.Record) }

// freeRecord gives r back to recordPool; nothing may use r afterwards.
func freeRecord(r *audit.Record) {
	*r = audit.Record{}
	recordPool.Put(r)
}

// record is a record of the flow with no decision: a completion. It comes
// from recordPool; a caller that is done with it may free it.
func (f *flowInfo) record(kind audit.Kind) *audit.Record {
	r := pooledRecord()
	r.Kind, r.Identity, r.Client = kind, f.identity, f.clientS
	return f.withTarget(r)
}

// withTarget sets r's request id, claimed user and target fields.
func (f *flowInfo) withTarget(r *audit.Record) *audit.Record {
	r.Request = f.id
	r.User = f.user
	r.Via = f.via
	r.Method = f.method
	r.Scheme = f.target.Scheme
	r.Host = f.target.Host
	r.Port = f.target.Port
	r.Path = f.target.Path
	r.Query = f.target.Query
	r.Inspected = f.inspected
	r.Traceparent = f.traceparent
	if f.notes != nil && f.kind == policy.KindHTTP {
		f.notes.set(r)
	}
	if f.leak != nil && f.kind == policy.KindHTTP {
		// Not a redirect's record, which copies the flow.
		r.Secret, r.SecretPattern = f.leak.names()
	}
	return r
}

// traceparentOf is the request's traceparent header if it is one valid
// W3C value; a repeated or malformed header is not recorded, so a client
// cannot make the record claim a trace it did not send.
func traceparentOf(h http.Header) string {
	if v := h.Values("Traceparent"); len(v) == 1 && audit.ValidTraceparent(v[0]) {
		return v[0]
	}
	return ""
}

// setClient records the client address from a RemoteAddr.
func (f *flowInfo) setClient(remote string) {
	f.client = clientAddr(remote)
	if f.client.IsValid() {
		f.clientS = f.client.String()
	}
}

// decisionRecord is the record appended before anything goes upstream. It
// comes from recordPool; a caller that is done with it may free it.
func (f *flowInfo) decisionRecord(v audit.Verdict) *audit.Record {
	r := pooledRecord()
	// Decided's record is copied, not kept: it stays on the stack.
	*r = *audit.Decided(recordKind(f.kind), f.identity, f.clientS, v)
	f.withTarget(r)
	if f.kind == policy.KindHTTP {
		// Not a redirect's record, which copies the flow.
		r.Credentials = f.credentials
	}
	return r
}

// recordKind is the audit kind of a decision at entry point k: the
// entry point's name.
func recordKind(k policy.Kind) audit.Kind { return audit.Kind(k.String()) }

// verdict is what a decision record says of its flow (the record's own
// verdict: allowed or refused, for which reason, by which rule of which
// bundle), and what only the operator reads of it. The zero verdict
// refuses.
type verdict struct {
	audit.Verdict
	// detail is for the operator's audit log only: it may name internal
	// addresses and is never sent to the client.
	detail string
}

// allowed is the verdict of a decision that allows.
func allowed(d *policy.Decision) verdict {
	return verdict{Verdict: audit.VerdictOf(*d)}
}

// auditDecision audits and counts a decision. A failed append turns an
// allow into a refusal (refusalForAuditErr says which): nothing goes
// upstream unless its decision is in the log.
func (s *Server) auditDecision(f *flowInfo, v verdict) error {
	kind := recordKind(f.kind)
	r := f.decisionRecord(v.Verdict)
	defer freeRecord(r)
	r.Error = v.detail
	if err := s.appendFlow(f, r); err != nil {
		if v.Allow && errors.Is(err, audit.ErrOverBudget) {
			// The identity spent its audit budget: the allow becomes a
			// refusal, which the meter counts rather than writes.
			d := f.decisionRecord(audit.Verdict{Reason: policy.ReasonAuditBudgetExceeded, Rule: v.Rule, Policy: v.Policy})
			if derr := s.appendFlow(f, d); derr != nil {
				s.failLog.Failed(derr, zap.String("request", f.id))
			}
			freeRecord(d)
			s.metrics.decided(kind, audit.DecisionDeny, policy.ReasonAuditBudgetExceeded)
			return err
		}
		s.metrics.decided(kind, audit.DecisionDeny, policy.ReasonAuditUnavailable)
		s.failLog.Failed(err, zap.String("request", f.id))
		return err
	}
	s.metrics.decided(kind, r.Decision, v.Reason)
	s.metrics.Decisions.IncWouldDeny(r)
	return nil
}

// appendFlow appends a record of flow f. A flow whose rule binds secrets
// has every field of every record scrubbed first: an upstream can put a
// secret it was sent into what the records copy (a redirect's Location
// becomes a record's path and query), and the log is append-only. A
// request whose head carried a secret pattern has its tokens replaced by
// the pattern's name in every record: a record names, never holds, one.
func (s *Server) appendFlow(f *flowInfo, r *audit.Record) error {
	if f.scrub != nil {
		r.Rewrite(f.scrub.String)
	}
	if f.leak != nil && f.leak.redact != nil {
		r.Rewrite(f.leak.redact)
	}
	return s.audit.Append(r)
}

// refusalForAuditErr is the refusal of a request whose allow the log did
// not take: over the identity's audit budget, or the log is unavailable.
func refusalForAuditErr(err error) refusal {
	if errors.Is(err, audit.ErrOverBudget) {
		return refusalOf(policy.ReasonAuditBudgetExceeded)
	}
	return refusalOf(policy.ReasonAuditUnavailable)
}

// claim is what a request names before it is parsed for a decision: its
// scheme, authority, escaped path and raw query, each "" when it names none.
type claim struct {
	scheme, authority, path, query string
}

// target is the claim as a Target, so that refusals before authentication
// still say where the client meant to go: the authority split into host and
// port (userinfo dropped: it may be a credential), the path and the raw
// query. The audit writer caps it.
func (c claim) target() Target {
	authority := c.authority
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		authority = authority[i+1:]
	}
	t := Target{Scheme: c.scheme, Host: authority, Path: c.path, Query: c.query}
	if h, p, err := net.SplitHostPort(authority); err == nil {
		t.Host = h
		if n, err := strconv.ParseUint(p, 10, 16); err == nil {
			t.Port = uint16(n)
		}
	}
	return t
}
