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
// NewDecisions: the allow and a deny by every declared reason.
func NewLogins(reg prometheus.Registerer) *Logins {
	l := &Logins{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egressd_postgres_logins_total",
		Help: "Postgres gate logins by decision and, for refused ones, reason.",
	}, []string{"decision", "reason"})}
	zeroDecisions(l.vec, policy.Reasons())
	reg.MustRegister(l.vec)
	return l
}

// Inc counts one login: refused with reason, or allowed when reason is
// empty. A nil *Logins counts nothing.
func (l *Logins) Inc(reason string) {
	if l == nil {
		return
	}
	if reason == "" {
		l.vec.WithLabelValues(audit.DecisionAllow.String(), reasonAllowed).Inc()
		return
	}
	l.vec.WithLabelValues(audit.DecisionDeny.String(), reason).Inc()
}
