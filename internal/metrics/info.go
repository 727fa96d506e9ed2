package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/egressd/egressd/internal/version"
)

// NewRegistry is the registry /metrics serves, with the Go runtime's and
// the process's collectors and the build info registered; every other
// collector is registered on it by the package that owns it.
func NewRegistry(in version.Info) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	RegisterBuildInfo(reg, in)
	return reg
}

// RegisterBuildInfo registers egressd_build_info{version, commit,
// go_version, pg_query_version} 1, the same fields `egressd version`
// prints.
func RegisterBuildInfo(reg prometheus.Registerer, in version.Info) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "egressd_build_info",
		Help: "Always 1; the labels say which build is running.",
		ConstLabels: prometheus.Labels{
			"version": in.Version, "commit": in.Commit,
			"go_version": in.GoVersion, "pg_query_version": in.PgQueryVersion,
		},
	})
	g.Set(1)
	reg.MustRegister(g)
}

// Policy exports the running policy bundle: egressd_policy_info{digest} 1
// for the bundle now deciding, and egressd_policy_loaded_timestamp_seconds,
// when it was loaded (time() minus it is the bundle's age).
type Policy struct {
	mu       sync.Mutex
	digest   string
	loaded   time.Time
	info     *prometheus.Desc
	loadedAt *prometheus.Desc
}

// NewPolicy registers the collector on reg; until the first Loaded it
// exports nothing.
func NewPolicy(reg prometheus.Registerer) *Policy {
	p := &Policy{
		info: prometheus.NewDesc("egressd_policy_info",
			"Always 1; digest is the running policy bundle's.", []string{"digest"}, nil),
		loadedAt: prometheus.NewDesc("egressd_policy_loaded_timestamp_seconds",
			"Unix time the running policy bundle was loaded (at start or by a reload).", nil, nil),
	}
	reg.MustRegister(p)
	return p
}

// Loaded records that the bundle with digest started deciding at t.
func (p *Policy) Loaded(digest string, t time.Time) {
	p.mu.Lock()
	p.digest, p.loaded = digest, t
	p.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (p *Policy) Describe(ch chan<- *prometheus.Desc) {
	ch <- p.info
	ch <- p.loadedAt
}

// Collect implements prometheus.Collector: one series of each, for the
// running bundle only, so a reload replaces the digest label rather than
// adding one.
func (p *Policy) Collect(ch chan<- prometheus.Metric) {
	p.mu.Lock()
	digest, loaded := p.digest, p.loaded
	p.mu.Unlock()
	if loaded.IsZero() {
		return
	}
	ch <- prometheus.MustNewConstMetric(p.info, prometheus.GaugeValue, 1, digest)
	ch <- prometheus.MustNewConstMetric(p.loadedAt, prometheus.GaugeValue, float64(loaded.UnixNano())/1e9)
}
