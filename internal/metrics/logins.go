package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/policy"
)

// Logins counts Postgres gate logins,
// egressd_postgres_logins_total{decision, reason}: allow "allowed" for a
// session that started, deny with the refusal's reason otherwise.
type Logins struct {
	vec *prometheus.CounterVec
}

// NewLogins registers the counter on reg, zero-initialised like
// NewDecisions: the allow and a deny by every declared reason a Postgres
// decision can be denied with.
func NewLogins(reg prometheus.Registerer) *Logins {
	l := &Logins{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egressd_postgres_logins_total",
		Help: "Postgres gate logins by decision and, for refused ones, reason.",
	}, []string{"decision", "reason"})}
	l.vec.WithLabelValues(audit.DecisionAllow.String(), policy.ReasonAllowed.String())
	zeroDenies(l.vec, policy.Reasons(), refuses(policy.KindSQL))
	reg.MustRegister(l.vec)
	return l
}

// Inc counts one login: refused with reason, or allowed when reason is
// empty. A nil *Logins counts nothing.
func (l *Logins) Inc(reason policy.Reason) {
	if l == nil {
		return
	}
	if reason == "" {
		l.vec.WithLabelValues(audit.DecisionAllow.String(), policy.ReasonAllowed.String()).Inc()
		return
	}
	l.vec.WithLabelValues(audit.DecisionDeny.String(), reason.String()).Inc()
}
