package export

import (
	"github.com/prometheus/client_golang/prometheus"
)

// registerMetrics exports, per sink (label "sink"):
//
//	egressd_audit_export_lag_records          records written but not yet delivered
//	egressd_audit_exported_records_total      records delivered (repeats after a restart included)
//	egressd_audit_export_failures_total       failed deliveries and reads, each retried
//	egressd_audit_export_last_success_timestamp_seconds  Unix time of the last delivery
//	egressd_audit_export_seq                  seq of the last delivered record
func registerMetrics(reg prometheus.Registerer, runners []*runner, head func() uint64) {
	for _, r := range runners {
		labels := prometheus.Labels{"sink": r.sink.Name()}
		if head != nil {
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name:        "egressd_audit_export_lag_records",
				Help:        "Audit records written but not yet delivered by the sink (the writer's seq minus the sink's).",
				ConstLabels: labels,
			}, func() float64 {
				h, s := head(), r.seq.Load()
				if h < s {
					return 0
				}
				return float64(h - s)
			}))
		}
		reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name:        "egressd_audit_exported_records_total",
				Help:        "Audit records the sink delivered (a batch repeated after a restart counts again).",
				ConstLabels: labels,
			}, func() float64 { return float64(r.exported.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name:        "egressd_audit_export_failures_total",
				Help:        "Failed audit exports and log reads; each is retried with backoff.",
				ConstLabels: labels,
			}, func() float64 { return float64(r.failures.Load()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name:        "egressd_audit_export_last_success_timestamp_seconds",
				Help:        "Unix time of the sink's last delivery (0 before the first).",
				ConstLabels: labels,
			}, func() float64 { return float64(r.lastOK.Load()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name:        "egressd_audit_export_seq",
				Help:        "Seq of the last audit record the sink delivered.",
				ConstLabels: labels,
			}, func() float64 { return float64(r.seq.Load()) }),
		)
	}
}
