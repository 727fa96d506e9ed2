package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/policy"
)

// BenchmarkCounting is the cost the DNS server and the gate pay per
// decision for counting it.
func BenchmarkCounting(b *testing.B) {
	app := Counting(audittest.Sink{}, NewDecisions(prometheus.NewRegistry()))
	r := audit.Decided(audit.KindSQL, "a", "c", audit.Verdict{Allow: true, Reason: policy.ReasonAllowed})
	b.ReportAllocs()
	for b.Loop() {
		if err := app.Append(r); err != nil {
			b.Fatal(err)
		}
	}
}
