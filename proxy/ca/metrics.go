package ca

import "github.com/prometheus/client_golang/prometheus"

// Register registers on reg the authority's Stats, read at scrape time, so
// that minting keeps plain counters under its own lock.
func (a *Authority) Register(reg prometheus.Registerer) {
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "egressd_inspect_leaves_minted_total",
			Help: "Leaf certificates signed for inspected CONNECTs (cache misses).",
		}, func() float64 { return float64(a.Stats().Mints) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "egressd_inspect_leaf_cache_hits_total",
			Help: "Inspected CONNECTs served a cached leaf (or one another CONNECT was minting).",
		}, func() float64 { return float64(a.Stats().Hits) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "egressd_inspect_leaf_cache_entries",
			Help: "Leaves in the in-memory cache (inspect.leaf_cache bounds it).",
		}, func() float64 { return float64(a.Stats().Cached) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "egressd_inspect_roots_created_total",
			Help: "Per-identity CA roots created in inspect.ca_dir since start.",
		}, func() float64 { return float64(a.Stats().Roots) }))
}
