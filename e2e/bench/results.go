package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"time"
)

// Results is everything one run measured, as structured data: BENCHMARKS.md
// and the chart are rendered from it, and it is saved as JSON beside them.
type Results struct {
	// Smoke marks a quick run (-quick): its figures measure nothing.
	Smoke   bool      `json:"smoke"`
	Commit  string    `json:"commit"`
	Date    time.Time `json:"date"`
	Command string    `json:"command"`
	// Elapsed is the run's length after the installs and the build.
	Elapsed  time.Duration     `json:"elapsed_ns"`
	Machine  Machine           `json:"machine"`
	Versions map[string]string `json:"versions"`
	Settings []string          `json:"settings"`
	// Commands are how each proxy was started ($DIR: its directory).
	Commands  map[string]string `json:"commands"`
	Workloads []*Workload       `json:"workloads"`
	// Repeats is how many times the workloads ran (-repeat); every round
	// says which repeat it belongs to. Zero or one: a single run.
	Repeats int `json:"repeats,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	NProc   int    `json:"nproc"`
	CPU     string `json:"cpu"`
	Kernel  string `json:"kernel"`
	LoadAvg string `json:"loadavg"` // at the end of the run
}

// Workload is one load applied to every target in turn, round after round.
type Workload struct {
	ID      string `json:"id"`
	Title   string `json:"title"`
	Unit    string `json:"unit"`     // of Round.Rate
	CPUUnit string `json:"cpu_unit"` // of Round.CPU; empty when not measured
	// LowerIsBetter holds for Rate figures like peak RSS.
	LowerIsBetter bool `json:"lower_is_better,omitempty"`
	Latency       bool `json:"latency,omitempty"`
	// Scale is the workload's size where a target depends on it (idle
	// tunnels).
	Scale   int       `json:"scale,omitempty"`
	Note    string    `json:"note,omitempty"`
	Targets []*Target `json:"targets"`
}

// Target kinds.
const (
	kindDirect  = "direct"  // no proxy: the machine's own figure
	kindEgressd = "egressd" // the system under test
	kindPeer    = "peer"    // what users would run instead
	kindCeiling = "ceiling" // a bare relay: what any proxy could reach
)

// Target is one proxy (or the direct path) under one workload.
type Target struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Subject marks the egressd target the summary reports (a workload may
	// run egressd in several modes).
	Subject bool    `json:"subject,omitempty"`
	Rounds  []Round `json:"rounds"`
	// Status is empty when the target ran; otherwise why it has no figure
	// ("not supported by this build: …", "error: …").
	Status string `json:"status,omitempty"`
	// Note qualifies the figures (e.g. a proxy without keep-alive).
	Note string `json:"note,omitempty"`
}

// latencyQuantiles are the percentiles every latency workload records.
var latencyQuantiles = []float64{50, 75, 90, 95, 99, 99.9}

// Round is one measurement of one target.
type Round struct {
	// Repeat is the repeat the round belongs to, from 0 (Results.Repeats).
	Repeat int     `json:"repeat,omitempty"`
	Rate   float64 `json:"rate"`
	CPU    float64 `json:"cpu,omitempty"`
	// LatencyMS holds latencyQuantiles, in milliseconds.
	LatencyMS []float64 `json:"latency_ms,omitempty"`
}

// target returns the workload's target of that name, adding it if new.
func (w *Workload) target(name, kind string) *Target {
	for _, t := range w.Targets {
		if t.Name == name {
			return t
		}
	}
	t := &Target{Name: name, Kind: kind}
	w.Targets = append(w.Targets, t)
	return t
}

// fail records why t has no (further) figures; the first reason stays.
func (t *Target) fail(status string) {
	if t.Status == "" {
		t.Status = status
	}
}

// ok reports whether t has figures to show.
func (t *Target) ok() bool { return t.Status == "" && len(t.Rounds) > 0 }

func (t *Target) rate() float64 { return medianOf(t.Rounds, func(r Round) float64 { return r.Rate }) }
func (t *Target) cpu() float64  { return medianOf(t.Rounds, func(r Round) float64 { return r.CPU }) }

// latency is the median over rounds of quantile i, in milliseconds.
func (t *Target) latency(i int) float64 {
	return medianOf(t.Rounds, func(r Round) float64 {
		if i < len(r.LatencyMS) {
			return r.LatencyMS[i]
		}
		return 0
	})
}

func medianOf(rs []Round, f func(Round) float64) float64 {
	xs := make([]float64, 0, len(rs))
	for _, r := range rs {
		xs = append(xs, f(r))
	}
	return median(xs)
}

// median is the middle value; of an even count, the mean of the two middle
// ones.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// better reports whether rate a beats rate b in w.
func (w *Workload) better(a, b float64) bool {
	if w.LowerIsBetter {
		return a < b
	}
	return a > b
}

// bestPeer is the peer with the best median rate, or nil.
func (w *Workload) bestPeer() *Target {
	var best *Target
	for _, t := range w.Targets {
		if t.Kind == kindPeer && t.ok() && (best == nil || w.better(t.rate(), best.rate())) {
			best = t
		}
	}
	return best
}

// first is the first target of kind (the subject, for egressd), or nil.
func (w *Workload) first(kind string) *Target {
	var found *Target
	for _, t := range w.Targets {
		if t.Kind != kind {
			continue
		}
		if kind == kindEgressd && t.Subject {
			return t
		}
		if found == nil {
			found = t
		}
	}
	return found
}

// writeJSON saves r at path.
func (r *Results) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	return nil
}

// named is the target called name, or nil.
func (w *Workload) named(name string) *Target {
	for _, t := range w.Targets {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// repeat is r as its repeat i alone measured it: every round of another
// repeat left out.
func (r *Results) repeat(i int) *Results {
	one := *r
	one.Repeats = 0
	one.Workloads = make([]*Workload, len(r.Workloads))
	for k, wl := range r.Workloads {
		w := *wl
		w.Targets = make([]*Target, len(wl.Targets))
		for j, t := range wl.Targets {
			c := *t
			c.Rounds = nil
			for _, rd := range t.Rounds {
				if rd.Repeat == i {
					c.Rounds = append(c.Rounds, rd)
				}
			}
			w.Targets[j] = &c
		}
		one.Workloads[k] = &w
	}
	return &one
}

// repeats is every repeat of r alone, or nil for a single run.
func (r *Results) repeats() []*Results {
	if r.Repeats < 2 {
		return nil
	}
	out := make([]*Results, r.Repeats)
	for i := range out {
		out[i] = r.repeat(i)
	}
	return out
}

// addRepeat pools the workloads repeat i measured into r's: each round
// marked with its repeat, appended to the same target of the same
// workload. A target that failed in one repeat keeps the first failure.
func (r *Results) addRepeat(i int, wls []*Workload) {
	for _, wl := range wls {
		for _, t := range wl.Targets {
			for k := range t.Rounds {
				t.Rounds[k].Repeat = i
			}
		}
		var pooled *Workload
		for _, p := range r.Workloads {
			if p.ID == wl.ID {
				pooled = p
			}
		}
		if pooled == nil {
			r.Workloads = append(r.Workloads, wl)
			continue
		}
		for _, t := range wl.Targets {
			p := pooled.named(t.Name)
			if p == nil {
				pooled.Targets = append(pooled.Targets, t)
				continue
			}
			p.Rounds = append(p.Rounds, t.Rounds...)
			if t.Status != "" {
				p.fail(fmt.Sprintf("repeat %d: %s", i+1, t.Status))
			}
		}
	}
}
