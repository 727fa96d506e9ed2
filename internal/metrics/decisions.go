// Package metrics holds the Prometheus collectors every entry point shares:
// decisions by kind, decision and reason (HTTP, CONNECT, DNS and SQL alike),
// Postgres gate logins, and what build and policy bundle are running. The
// proxy's own connection and latency metrics stay in package proxy.
package metrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/policy"
)

// counted are the record kinds whose decisions are counted, and so are
// zero-initialised: every entry point, and the completions of allowed HTTP
// requests that end refused. A tunnel's completion is counted under
// connect (the proxy counts it so), so connect_done has no series.
// Connections refused on accept (kind accept) are counted apart, in
// egressd_proxy_connections_rejected_total.
var counted = []struct {
	kind audit.Kind
	// possible reports whether a deny of the kind can carry reason r.
	possible func(r policy.Reason) bool
	// allows is false for a completion, which is counted only when it
	// refuses.
	allows bool
}{
	{audit.KindHTTP, refuses(policy.KindHTTP), true},
	{audit.KindConnect, func(r policy.Reason) bool { return r.Refuses(policy.KindConnect) || r.Ends(policy.KindConnect) }, true},
	{audit.KindRedirect, refuses(policy.KindRedirect), true},
	{audit.KindDNS, refuses(policy.KindDNS), true},
	{audit.KindSQL, refuses(policy.KindSQL), true},
	{audit.KindHTTPDone, func(r policy.Reason) bool { return r.Ends(policy.KindHTTP) }, false},
}

// refuses is whether a decision of entry point k can be denied with a
// reason.
func refuses(k policy.Kind) func(policy.Reason) bool {
	return func(r policy.Reason) bool { return r.Refuses(k) }
}

// Decisions counts every decision of every entry point in one vector,
// egressd_decisions_total{kind, decision, reason}, and the allows an
// observe mode let through in egressd_would_deny_total{kind, reason,
// observed_by} as well.
type Decisions struct {
	vec *prometheus.CounterVec
	// wouldDeny counts observed allows by the reason they would have
	// been denied with and whose mode let them through.
	wouldDeny *prometheus.CounterVec
}

// observers are the values of the observed_by label.
var observers = []policy.ObservedBy{policy.ObservedByRule, policy.ObservedByIdentity, policy.ObservedByBundle}

// NewDecisions registers the counter on reg with one series at zero for
// each entry point's allow and for each kind's deny by every declared reason
// the kind can be denied with (policy.Reason.Refuses and Ends): a series
// that exists from the start lets rate() and alerts see its first refusal.
// Reasons only the bundle spells, and client_closed of a decision whose
// caller left, appear on first use.
func NewDecisions(reg prometheus.Registerer) *Decisions {
	d := &Decisions{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egressd_decisions_total",
		Help: "Decisions of every entry point (http, connect, redirect, dns, sql, and refusals of allowed requests in http_done/connect_done) by decision and reason.",
	}, []string{"kind", "decision", "reason"}),
		wouldDeny: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressd_would_deny_total",
			Help: "Allows that an observe mode (of the deciding rule, the identity or the bundle) let through, by the reason they would have been denied with; each is counted as an allow in egressd_decisions_total too.",
		}, []string{"kind", "reason", "observed_by"}),
	}
	reasons := policy.Reasons()
	for _, c := range counted {
		if c.allows {
			d.vec.WithLabelValues(c.kind.String(), audit.DecisionAllow.String(), policy.ReasonAllowed.String())
			zeroWouldDeny(d.wouldDeny, reasons, c.possible, c.kind.String())
		}
		zeroDenies(d.vec, reasons, c.possible, c.kind.String())
	}
	reg.MustRegister(d.vec, d.wouldDeny)
	return d
}

// zeroDenies creates at zero the series of vec whose labels are labels
// followed by a deny for each of reasons that is possible.
func zeroDenies(vec *prometheus.CounterVec, reasons []policy.Reason, possible func(policy.Reason) bool, labels ...string) {
	for _, r := range reasons {
		if possible(r) {
			vec.WithLabelValues(append(labels, audit.DecisionDeny.String(), r.String())...)
		}
	}
}

// zeroWouldDeny creates at zero the series of vec for kind, each of
// reasons that is possible and Liftable, and each observer.
func zeroWouldDeny(vec *prometheus.CounterVec, reasons []policy.Reason, possible func(policy.Reason) bool, kind string) {
	for _, r := range reasons {
		if r.Liftable() && possible(r) {
			for _, by := range observers {
				vec.WithLabelValues(kind, r.String(), by.String())
			}
		}
	}
}

// Inc counts one decision. A nil *Decisions counts nothing.
func (d *Decisions) Inc(kind audit.Kind, decision audit.Decision, reason policy.Reason) {
	if d == nil {
		return
	}
	d.With(kind, decision, reason).Inc()
}

// IncWouldDeny counts r in egressd_would_deny_total when it is an allow an
// observe mode let through (r.WouldDeny set); r's decision itself is
// counted by Inc. A nil *Decisions counts nothing.
func (d *Decisions) IncWouldDeny(r *audit.Record) {
	if d == nil || r.WouldDeny == "" {
		return
	}
	d.wouldDeny.WithLabelValues(r.Kind.String(), r.WouldDeny, r.ObservedBy).Inc()
}

// With is the series of one kind, decision and reason.
func (d *Decisions) With(kind audit.Kind, decision audit.Decision, reason policy.Reason) prometheus.Counter {
	return d.vec.WithLabelValues(kind.String(), decision.String(), reason.String())
}

// Counting returns an Appender that appends to next and counts every
// decision record as the client meets it: the record's own decision once
// the log took it; deny audit_unavailable when the log refused it (the
// entry point then refuses); nothing for an allow over the identity's
// audit budget, because the entry point appends the refusal that replaces
// it (audit_budget_exceeded), which is counted in turn. Records without a
// decision (writer records) are not counted. The DNS server and the
// Postgres gate append through it; the proxy counts at its call sites.
func Counting(next audit.Appender, d *Decisions) audit.Appender {
	return countingAppender{next: next, d: d}
}

type countingAppender struct {
	next audit.Appender
	d    *Decisions
}

func (c countingAppender) Append(r *audit.Record) error {
	err := c.next.Append(r)
	switch {
	case r.Decision == "":
	case err == nil:
		c.d.Inc(r.Kind, r.Decision, policy.Reason(r.Reason))
		c.d.IncWouldDeny(r)
	case errors.Is(err, audit.ErrOverBudget):
	default:
		c.d.Inc(r.Kind, audit.DecisionDeny, policy.ReasonAuditUnavailable)
	}
	return err
}
