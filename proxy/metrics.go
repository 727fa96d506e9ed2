package proxy

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/metrics"
	"github.com/egressd/egressd/policy"
)

// Metrics are the proxy's Prometheus collectors. They are registered on the
// registry given to NewMetrics, never on the global one.
type Metrics struct {
	// Decisions counts every entry point's decisions; the proxy's are
	// kinds http, connect, redirect, http_done and connect_done.
	// The DNS server and the Postgres gate count into the same vector.
	Decisions       *metrics.Decisions
	decisionSeconds prometheus.Histogram
	upstreamSeconds prometheus.Histogram
	tunnelBytes     *prometheus.CounterVec
	active          *prometheus.GaugeVec
	acceptRejected  prometheus.Counter
	clientClosed    *prometheus.CounterVec
	// Reloads counts policy/config reloads by result ("ok", "failed").
	Reloads *prometheus.CounterVec
	// tokens counts model API tokens by identity, model and direction;
	// models holds the model labels given so far (modelLabels).
	tokens *prometheus.CounterVec
	// budgetBytes counts the bytes counted against identities' byte
	// budgets.
	budgetBytes *prometheus.CounterVec
	models      sync.Map
	nModel      atomic.Int32
}

// NewMetrics creates the collectors and registers them.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Decisions: metrics.NewDecisions(reg),
		decisionSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "egressd_proxy_decision_seconds",
			Help:    "Time from request head to decision (identity, facts, floor, policy, audit).",
			Buckets: prometheus.ExponentialBuckets(5e-6, 2, 16),
		}),
		upstreamSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "egressd_proxy_upstream_seconds",
			Help:    "Time from dispatch to the upstream response head (HTTP) or connect (tunnels).",
			Buckets: prometheus.ExponentialBuckets(1e-4, 2, 18),
		}),
		tunnelBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressd_proxy_tunnel_bytes_total",
			Help: "Bytes copied through CONNECT tunnels by direction (up: client to upstream).",
		}, []string{"direction"}),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egressd_proxy_active",
			Help: "Open client connections and open tunnels.",
		}, []string{"what"}),
		acceptRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "egressd_proxy_connections_rejected_total",
			Help: "Client connections closed on accept: max_conns was reached or file descriptors were short.",
		}),
		clientClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressd_proxy_client_closed_total",
			Help: "Allowed requests the client hung up on, by when: before the upstream answered (waiting) or while the response was copied (response); counted apart from upstream failures.",
		}, []string{"when"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressd_model_tokens_total",
			Help: "Model API tokens the answers reported, by identity, model and direction (input, output); models past the first 100 are counted as \"other\".",
		}, []string{"identity", "model", "direction"}),
		budgetBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressd_budget_bytes_total",
			Help: "Bytes sent and received by identities with a byte budget, counted against it as each request or opaque tunnel completes.",
		}, []string{"identity"}),
		Reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egressd_reloads_total",
			Help: "Configuration and policy reloads by result.",
		}, []string{"result"}),
	}
	// Every labelled series exists from the start, at zero, so that
	// rate() and a dashboard see the first tunnel, hang-up and reload.
	for _, what := range []string{"connections", "tunnels"} {
		m.active.WithLabelValues(what)
	}
	for _, dir := range []string{"up", "down"} {
		m.tunnelBytes.WithLabelValues(dir)
	}
	for _, when := range []string{"waiting", "response"} {
		m.clientClosed.WithLabelValues(when)
	}
	for _, result := range []string{"ok", "failed"} {
		m.Reloads.WithLabelValues(result)
	}
	reg.MustRegister(m.decisionSeconds, m.upstreamSeconds, m.tunnelBytes,
		m.active, m.acceptRejected, m.clientClosed, m.Reloads, m.tokens, m.budgetBytes)
	return m
}

func (m *Metrics) decided(kind audit.Kind, decision audit.Decision, reason policy.Reason) {
	m.Decisions.Inc(kind, decision, reason)
}

// modelLabels bounds the model label's values: a model name comes from
// the client (a rule's glob may allow many), and every value is a series
// kept for the life of the process.
const modelLabels = 100

// countTokens counts a model answer's usage.
func (m *Metrics) countTokens(identity, model string, in, out int64) {
	if _, ok := m.models.Load(model); !ok {
		if m.nModel.Add(1) > modelLabels {
			model = "other"
		} else {
			m.models.Store(model, true)
		}
	}
	m.tokens.WithLabelValues(identity, model, "input").Add(float64(in))
	m.tokens.WithLabelValues(identity, model, "output").Add(float64(out))
}
