package bundlesrc

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Poll results, the result label of egressd_bundle_polls_total.
const (
	// resultOK: a new bundle was put in force.
	resultOK = "ok"
	// resultNotModified: the service answered 304 to If-None-Match.
	resultNotModified = "not_modified"
	// resultFailed: the download, its HTTP status, the tarball or the
	// signature failed.
	resultFailed = "failed"
	// resultRefused: a verified bundle failed to compile, test or pass
	// the config's checks.
	resultRefused = "refused"
)

var results = []string{resultOK, resultNotModified, resultFailed, resultRefused}

// status is what the source reports. Its own lock, not Source.mu: a
// /readyz or a scrape must not wait for a bundle to compile.
type status struct {
	mu        sync.Mutex
	revision  string    // of the bundle in force
	loaded    time.Time // when it was put in force; zero before the first
	lastPoll  time.Time
	lastErr   error // of the last poll; nil if it succeeded
	lastErrAt time.Time
	polls     map[string]float64
}

// record notes one poll's result at now: err nil for ok and not_modified,
// and for ok the revision put in force.
func (st *status) record(now time.Time, result, revision string, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.polls == nil {
		st.polls = map[string]float64{}
	}
	st.polls[result]++
	st.lastPoll, st.lastErr = now, err
	if err != nil {
		st.lastErrAt = now
	}
	if result == resultOK {
		st.revision, st.loaded = revision, now
	}
}

// last is the last poll's error, nil if it succeeded or there was none.
func (st *status) last() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.lastErr
}

// Ready is the /readyz check: it fails only while no bundle is in force
// (serve does not listen before the first, so only a source used before
// First succeeds). A failing service leaves the last good bundle
// deciding, which is ready; Detail says so.
func (s *Source) Ready(context.Context) error {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	if s.st.loaded.IsZero() {
		if s.st.lastErr != nil {
			return fmt.Errorf("no policy bundle from %s yet: %w", s.cfg.BundleURL, s.st.lastErr)
		}
		return fmt.Errorf("no policy bundle from %s yet", s.cfg.BundleURL)
	}
	return nil
}

// Detail is the /readyz line's detail: the revision in force, its age,
// and the last poll's error, if it failed.
func (s *Source) Detail() string {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	now := s.now()
	var b strings.Builder
	if !s.st.loaded.IsZero() {
		fmt.Fprintf(&b, "revision %q from %s, in force for %s", s.st.revision, s.cfg.BundleURL, now.Sub(s.st.loaded).Round(time.Second))
	}
	if s.st.lastErr != nil {
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "last poll failed %s ago: %v", now.Sub(s.st.lastErrAt).Round(time.Second), s.st.lastErr)
	}
	return b.String()
}

var (
	descInfo = prometheus.NewDesc("egressd_bundle_info",
		"Always 1; revision is the .manifest revision of the bundle from policy.bundle_url in force.", []string{"revision"}, nil)
	descLoaded = prometheus.NewDesc("egressd_bundle_loaded_timestamp_seconds",
		"Unix time the bundle from policy.bundle_url in force was put in force.", nil, nil)
	descAge = prometheus.NewDesc("egressd_bundle_age_seconds",
		"Seconds since the bundle from policy.bundle_url in force was put in force.", nil, nil)
	descLastPoll = prometheus.NewDesc("egressd_bundle_last_poll_timestamp_seconds",
		"Unix time of the last poll of policy.bundle_url.", nil, nil)
	descFailing = prometheus.NewDesc("egressd_bundle_failing",
		"1 if the last poll of policy.bundle_url failed or its bundle was refused (the bundle in force stays), else 0.", nil, nil)
	descPolls = prometheus.NewDesc("egressd_bundle_polls_total",
		"Polls of policy.bundle_url by result: ok (a new bundle in force), not_modified, failed (download, status, tarball or signature), "+
			"refused (compile, Rego tests or config checks).", []string{"result"}, nil)
)

// Describe implements prometheus.Collector.
func (s *Source) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInfo, descLoaded, descAge, descLastPoll, descFailing, descPolls} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. Before the first bundle only
// the poll counts and the failing gauge are exported.
func (s *Source) Collect(ch chan<- prometheus.Metric) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	for _, r := range results {
		ch <- prometheus.MustNewConstMetric(descPolls, prometheus.CounterValue, s.st.polls[r], r)
	}
	failing := 0.0
	if s.st.lastErr != nil {
		failing = 1
	}
	ch <- prometheus.MustNewConstMetric(descFailing, prometheus.GaugeValue, failing)
	if !s.st.lastPoll.IsZero() {
		ch <- prometheus.MustNewConstMetric(descLastPoll, prometheus.GaugeValue, unix(s.st.lastPoll))
	}
	if s.st.loaded.IsZero() {
		return
	}
	ch <- prometheus.MustNewConstMetric(descInfo, prometheus.GaugeValue, 1, s.st.revision)
	ch <- prometheus.MustNewConstMetric(descLoaded, prometheus.GaugeValue, unix(s.st.loaded))
	ch <- prometheus.MustNewConstMetric(descAge, prometheus.GaugeValue, s.now().Sub(s.st.loaded).Seconds())
}

func unix(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
