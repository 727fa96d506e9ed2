package main

import (
	"fmt"
	"slices"
	"strings"
)

// The targets issues 14, 16, 24, 26 and 28 judge egressd by, each checked
// against the figures of the same run: a ratio to a named peer, the best
// peer or the bare relay, or an absolute bound.

// goal is one target.
type goal struct {
	issue    int
	workload string
	metric   string // "rate", "cpu" or "p99"
	// against: a target name ("squid"), "best" (the best peer), "ceiling"
	// (the bare relay), "direct" (no proxy), or "" for an absolute bound
	// in the workload's unit.
	against string
	atLeast bool // measured ≥ bound (else ≤)
	bound   float64
	// scale, when set, is the workload size the bound is for.
	scale int
	// subject, when set, is the target measured (another of egressd's
	// listeners); else egressd's subject target.
	subject string
}

var goals = []goal{
	{16, "get", "rate", "squid", true, 1.5, 0, ""},
	{16, "get", "cpu", "squid", false, 0.45, 0, ""},
	{16, "get", "p99", "squid", false, 1, 0, ""},
	{16, "get-paced", "p99", "squid", false, 1, 0, ""},
	{16, "connect", "rate", "best", true, 1.25, 0, ""},
	{16, "connect", "rate", "ceiling", true, 0.95, 0, ""},
	{16, "connect-tls", "rate", "best", true, 1, 0, ""},
	{16, "pgbench-S", "rate", "pgbouncer (session)", true, 1.1, 0, ""},
	{16, "pgbench-S-extended", "rate", "pgbouncer (session)", true, 1.1, 0, ""},
	{16, "pgbench-tpcb", "rate", "pgbouncer (session)", true, 1.1, 0, ""},
	{16, "pgbench-S", "cpu", "pgbouncer (session)", false, 1.25, 0, ""},
	{16, "pgbench-S-extended", "cpu", "pgbouncer (session)", false, 1.25, 0, ""},
	{16, "pgbench-tpcb", "cpu", "pgbouncer (session)", false, 1.25, 0, ""},
	{16, "idle", "rate", "", false, 100, 5000, ""},
	// A tail no worse than Squid's: at one offered load (equalShare of
	// Squid's saturated rate) and, within 1.5×, at saturation.
	{28, "get-equal", "p99", "squid", false, 1, 0, ""},
	{28, "get", "p99", "squid", false, 1.5, 0, ""},
	// Tunnels at the peers' speed, at a fraction of their CPU.
	{28, "connect", "rate", "best", true, 1, 0, ""},
	{28, "connect", "rate", kindDirect, true, 0.85, 0, ""},
	{28, "connect", "cpu", "best", false, 0.6, 0, ""},
	{14, "https", "rate", "squid (ssl_bump)", true, 1.2, 0, ""},
	{14, "leaf-hit", "rate", "", false, 5, 0, ""},
	{14, "leaf-mint", "rate", "", false, 1000, 0, ""},
	{24, "check", "rate", "", false, 30, 0, ""},
	{24, "check-batch", "rate", "", true, 20000, 0, ""},
	// Arrivals by SOCKS5 and the transparent listener within 5% of
	// CONNECT through the HTTP proxy, on the same egressd.
	{26, "connect", "rate", "egressd", true, 0.95, 0, targetSOCKS},
	{26, "connect-tls", "rate", "egressd", true, 0.95, 0, targetSOCKS},
	{26, "connect-tls", "rate", "egressd", true, 0.95, 0, targetTransparent},
}

func (g goal) value(t *Target) float64 {
	switch g.metric {
	case "cpu":
		return t.cpu()
	case "p99":
		return t.latency(slices.Index(latencyQuantiles, 99))
	}
	return t.rate()
}

// outcome is a goal judged against the figures of one run or one repeat.
type outcome struct {
	text     string // the goal
	measured string // what was measured, as the report shows it
	// x is the figure or ratio the bound applies to; judged is false when
	// there is none (measured says why).
	x      float64
	judged bool
	ratio  bool // x is a ratio (else a figure in unit)
	unit   string
}

// met reports whether x meets the goal's bound.
func (g goal) met(x float64) bool { return g.atLeast && x >= g.bound || !g.atLeast && x <= g.bound }

// worse reports whether x is further from meeting the goal than y.
func (g goal) worse(x, y float64) bool { return g.atLeast && x < y || !g.atLeast && x > y }

// check returns the goal's text, what was measured and the verdict, or
// ok false when the run has no such workload. A repeated run (-repeat)
// meets a goal only when its worst repeat does; measured names that
// repeat's figure and the spread over every repeat.
func (g goal) check(r *Results) (text, measured, verdict string, ok bool) {
	o, ok := g.outcome(r)
	if !ok {
		return "", "", "", false
	}
	if !o.judged {
		return o.text, o.measured, "not measured", true
	}
	reps := r.repeats()
	if reps == nil {
		return o.text, o.measured, pass(g.met(o.x)), true
	}
	var worst outcome
	lo, hi := 0.0, 0.0
	for i, rep := range reps {
		ro, _ := g.outcome(rep)
		if !ro.judged {
			return o.text, fmt.Sprintf("repeat %d: %s", i+1, ro.measured), "not measured", true
		}
		if i == 0 || g.worse(ro.x, worst.x) {
			worst = ro
		}
		if i == 0 || ro.x < lo {
			lo = ro.x
		}
		if i == 0 || ro.x > hi {
			hi = ro.x
		}
	}
	format := func(x float64) string { return num(x) + " " + o.unit }
	if o.ratio {
		format = func(x float64) string { return fmt.Sprintf("%.2f×", x) }
	}
	measured = fmt.Sprintf("worst of %d repeats: %s; spread %s–%s", len(reps), worst.measured, format(lo), format(hi))
	return o.text, measured, pass(g.met(worst.x)), true
}

// outcome judges the goal against r's figures (medians over its rounds),
// or returns ok false when r has no such workload.
func (g goal) outcome(r *Results) (o outcome, ok bool) {
	var wl *Workload
	for _, w := range r.Workloads {
		if w.ID == g.workload {
			wl = w
		}
	}
	if wl == nil {
		return outcome{}, false
	}
	op := "≤"
	if g.atLeast {
		op = "≥"
	}
	what := wl.Title
	if g.subject != "" {
		what += ", " + g.subject
	}
	switch g.metric {
	case "cpu":
		what += ": proxy CPU, " + wl.CPUUnit
	case "p99":
		what += ": p99 latency"
	}
	var other *Target
	switch g.against {
	case "":
		o.text = fmt.Sprintf("%s %s %s %s", what, op, num(g.bound), wl.Unit)
	case "best":
		other = wl.bestPeer()
		o.text = fmt.Sprintf("%s %s %g× the best peer", what, op, g.bound)
	case "ceiling":
		other = wl.first(kindCeiling)
		o.text = fmt.Sprintf("%s %s %g× the bare relay", what, op, g.bound)
	case kindDirect:
		other = wl.first(kindDirect)
		o.text = fmt.Sprintf("%s %s %g× direct", what, op, g.bound)
	default:
		other = wl.named(g.against)
		o.text = fmt.Sprintf("%s %s %g× %s's", what, op, g.bound, g.against)
	}
	e := wl.first(kindEgressd)
	if g.subject != "" {
		e = wl.named(g.subject)
	}
	o.unit = wl.Unit
	switch {
	case g.scale != 0 && wl.Scale != g.scale:
		o.measured = fmt.Sprintf("measured at %d, not %d", wl.Scale, g.scale)
		return o, true
	case e == nil || !e.ok():
		o.measured = "no figure"
		if e != nil && e.Status != "" {
			o.measured = e.Status
		}
		return o, true
	case g.against == "":
		o.x, o.judged = g.value(e), true
		o.measured = num(o.x) + " " + wl.Unit
		return o, true
	case other == nil || !other.ok() || g.value(other) == 0:
		o.measured = "no figure for " + g.against
		return o, true
	}
	o.x, o.judged, o.ratio = g.value(e)/g.value(other), true, true
	o.measured = fmt.Sprintf("%.2f× (%s vs %s)", o.x, num(g.value(e)), num(g.value(other)))
	return o, true
}

func pass(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

// goalsTable writes the targets of the workloads the run has.
func goalsTable(b *strings.Builder, r *Results) {
	var rows []string
	for _, g := range goals {
		text, measured, verdict, ok := g.check(r)
		if ok {
			rows = append(rows, fmt.Sprintf("| %d | %s | %s | %s |\n", g.issue, cell(text), cell(measured), verdict))
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("## Targets\n\nThe targets of issues 14, 16, 24, 26 and 28, checked against this run's figures (ratios of medians, same run).")
	if r.Repeats > 1 {
		fmt.Fprintf(b, " The run was repeated %d times: a target is met only when every repeat meets it, judged on that repeat's own medians; measured is the worst repeat and the spread over all of them.", r.Repeats)
	}
	if r.Smoke {
		b.WriteString(" A smoke run's verdicts mean nothing.")
	}
	b.WriteString("\n\n")
	b.WriteString("| issue | target | measured | verdict |\n|---|---|---|---|\n")
	for _, r := range rows {
		b.WriteString(r)
	}
	b.WriteString("\n")
}
