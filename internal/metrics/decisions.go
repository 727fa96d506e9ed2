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

// reasonAllowed is the reason of every allow the bundle gives.
const reasonAllowed = "allowed"

// Kinds are the record kinds whose decisions are counted, and so are
// zero-initialised: every entry point, and the completions that can turn an
// allowed request into a refusal. Connections refused on accept (kind
// accept) are counted apart, in egressd_proxy_connections_rejected_total.
var Kinds = []audit.Kind{
	audit.KindHTTP, audit.KindConnect, audit.KindRedirect, audit.KindDNS, audit.KindSQL,
	audit.KindHTTPDone, audit.KindConnectDone,
}

// Decisions counts every decision of every entry point in one vector,
// egressd_decisions_total{kind, decision, reason}.
type Decisions struct {
	vec *prometheus.CounterVec
}

// NewDecisions registers the counter on reg with one series at zero for
// each kind's allow and for each kind's deny by every reason Go declares
// (policy.Reasons): reasons are a closed set, and a series that exists
// from the start lets rate() and alerts see its first refusal. Reasons only
// the bundle spells appear on first use.
func NewDecisions(reg prometheus.Registerer) *Decisions {
	d := &Decisions{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egressd_decisions_total",
		Help: "Decisions of every entry point (http, connect, redirect, dns, sql, and refusals of allowed requests in http_done/connect_done) by decision and reason.",
	}, []string{"kind", "decision", "reason"})}
	reasons := policy.Reasons()
	for _, k := range Kinds {
		zeroDecisions(d.vec, reasons, k.String())
	}
	reg.MustRegister(d.vec)
	return d
}

// zeroDecisions creates at zero the series of vec whose labels are
// labels followed by the allow, and by a deny for each of reasons.
func zeroDecisions(vec *prometheus.CounterVec, reasons []policy.Reason, labels ...string) {
	vec.WithLabelValues(append(labels, audit.DecisionAllow.String(), reasonAllowed)...)
	for _, r := range reasons {
		vec.WithLabelValues(append(labels, audit.DecisionDeny.String(), r.String())...)
	}
}

// Inc counts one decision. A nil *Decisions counts nothing.
func (d *Decisions) Inc(kind audit.Kind, decision audit.Decision, reason string) {
	if d == nil {
		return
	}
	d.With(kind, decision, reason).Inc()
}

// With is the series of one kind, decision and reason.
func (d *Decisions) With(kind audit.Kind, decision audit.Decision, reason string) prometheus.Counter {
	return d.vec.WithLabelValues(kind.String(), decision.String(), reason)
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
		c.d.Inc(r.Kind, r.Decision, r.Reason)
	case errors.Is(err, audit.ErrOverBudget):
	default:
		c.d.Inc(r.Kind, audit.DecisionDeny, policy.ReasonAuditUnavailable.String())
	}
	return err
}
