package main

import (
	"fmt"
	"slices"
	"strings"
)

// The targets issues 14, 16, 24 and 26 judge egressd by, each checked
// against the figures of the same run: a ratio to a named peer, the best
// peer or the bare relay, or an absolute bound.

// goal is one target.
type goal struct {
	issue    int
	workload string
	metric   string // "rate", "cpu" or "p99"
	// against: a target name ("squid"), "best" (the best peer), "ceiling"
	// (the bare relay), or "" for an absolute bound in the workload's unit.
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

// check returns the goal's text, what was measured and the verdict, or
// ok false when the run has no such workload.
func (g goal) check(r *Results) (text, measured, verdict string, ok bool) {
	var wl *Workload
	for _, w := range r.Workloads {
		if w.ID == g.workload {
			wl = w
		}
	}
	if wl == nil {
		return "", "", "", false
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
		text = fmt.Sprintf("%s %s %s %s", what, op, num(g.bound), wl.Unit)
	case "best":
		other = wl.bestPeer()
		text = fmt.Sprintf("%s %s %g× the best peer", what, op, g.bound)
	case "ceiling":
		other = wl.first(kindCeiling)
		text = fmt.Sprintf("%s %s %g× the bare relay", what, op, g.bound)
	default:
		other = wl.named(g.against)
		text = fmt.Sprintf("%s %s %g× %s's", what, op, g.bound, g.against)
	}
	e := wl.first(kindEgressd)
	if g.subject != "" {
		e = wl.named(g.subject)
	}
	switch {
	case g.scale != 0 && wl.Scale != g.scale:
		return text, fmt.Sprintf("measured at %d, not %d", wl.Scale, g.scale), "not measured", true
	case e == nil || !e.ok():
		status := "no figure"
		if e != nil && e.Status != "" {
			status = e.Status
		}
		return text, status, "not measured", true
	case g.against == "":
		v := g.value(e)
		return text, num(v) + " " + wl.Unit, pass(g.atLeast && v >= g.bound || !g.atLeast && v <= g.bound), true
	case other == nil || !other.ok() || g.value(other) == 0:
		return text, "no figure for " + g.against, "not measured", true
	}
	x := g.value(e) / g.value(other)
	return text, fmt.Sprintf("%.2f× (%s vs %s)", x, num(g.value(e)), num(g.value(other))),
		pass(g.atLeast && x >= g.bound || !g.atLeast && x <= g.bound), true
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
	b.WriteString("## Targets\n\nThe targets of issues 14, 16, 24 and 26, checked against this run's figures (ratios of medians, same run).")
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
