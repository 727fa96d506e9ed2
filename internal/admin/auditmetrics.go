package admin

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/audit"
)

// auditCollector exports the audit writer's counters at scrape time, so the
// writer's hot path keeps plain atomics and no Prometheus dependency.
type auditCollector struct {
	stats func() audit.Stats
	descs map[string]*prometheus.Desc
}

var auditMetrics = []struct {
	name, help string
	counter    bool
	value      func(audit.Stats) float64
}{
	{"egressd_audit_appended_total", "Records accepted by Append.", true, func(s audit.Stats) float64 { return float64(s.Appended) }},
	{"egressd_audit_refused_total", "Appends refused (the caller denied with audit_unavailable).", true, func(s audit.Stats) float64 { return float64(s.Refused) }},
	{"egressd_audit_queue_full_total", "Appends refused because the queue was full.", true, func(s audit.Stats) float64 { return float64(s.QueueFull) }},
	{"egressd_audit_written_total", "Lines written, writer records included.", true, func(s audit.Stats) float64 { return float64(s.Written) }},
	{"egressd_audit_write_errors_total", "Failed writes.", true, func(s audit.Stats) float64 { return float64(s.WriteErrors) }},
	{"egressd_audit_sync_errors_total", "Failed fsyncs.", true, func(s audit.Stats) float64 { return float64(s.SyncErrors) }},
	{"egressd_audit_syncs_total", "fsync calls.", true, func(s audit.Stats) float64 { return float64(s.Syncs) }},
	{"egressd_audit_sync_waits_total", "Appends (sync: interval) that waited for an fsync: the oldest acknowledged record not yet fsynced was older than audit.sync_interval.", true, func(s audit.Stats) float64 { return float64(s.SyncWaits) }},
	{"egressd_audit_bytes_total", "Bytes written.", true, func(s audit.Stats) float64 { return float64(s.Bytes) }},
	{"egressd_audit_seq", "Sequence number of the last record written.", false, func(s audit.Stats) float64 { return float64(s.Seq) }},
	{"egressd_audit_queue_depth", "Records queued and not yet written.", false, func(s audit.Stats) float64 { return float64(s.QueueDepth) }},
}

// RegisterAudit registers on reg the audit writer's Stats and the meter's
// (the one every entry point appends through), read at scrape time.
func RegisterAudit(reg prometheus.Registerer, writer func() audit.Stats, meter func() audit.MeterStats) {
	c := &auditCollector{stats: writer, descs: make(map[string]*prometheus.Desc, len(auditMetrics))}
	for _, m := range auditMetrics {
		c.descs[m.name] = prometheus.NewDesc(m.name, m.help, nil, nil)
	}
	reg.MustRegister(c,
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "egressd_audit_refusals_folded_total",
			Help: "Refusals counted into aggregate audit records (audit.refusal_samples) instead of written in full.",
		}, func() float64 { return float64(meter().Folded) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "egressd_audit_over_budget_total",
			Help: "Allows refused with audit_budget_exceeded because their identity spent its audit budget.",
		}, func() float64 { return float64(meter().OverBudget) }))
}

func (c *auditCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *auditCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	for _, m := range auditMetrics {
		t := prometheus.GaugeValue
		if m.counter {
			t = prometheus.CounterValue
		}
		ch <- prometheus.MustNewConstMetric(c.descs[m.name], t, m.value(s))
	}
}
