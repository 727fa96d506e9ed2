package replay

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// Report sums up a replay.
type Report struct {
	// Records is how many records were read.
	Records int `json:"records"`
	// Redecidable is how many were re-decided exactly: Same, NewlyDenied
	// and NewlyAllowed; Verified of them under their own bundle too.
	Redecidable  int `json:"redecidable"`
	Verified     int `json:"verified"`
	Same         int `json:"same"`
	NewlyDenied  int `json:"newly_denied"`
	NewlyAllowed int `json:"newly_allowed"`
	// NotRedecidable counts the records that lack a fact, by fact.
	NotRedecidable map[Fact]int `json:"not_redecidable"`
	// Skipped counts the records that are no decision of a bundle, by
	// Entry.Skip.
	Skipped map[string]int `json:"skipped"`
	// Unloaded names the records' bundles that could not be loaded (not
	// archived): their records were re-decided without the oracle.
	Unloaded []string `json:"unloaded,omitempty"`
	// Groups are the changes grouped by outcome, rules and identity, the
	// largest first.
	Groups []*Group `json:"groups"`
	// Changes are every changed record, in log order.
	Changes []Entry `json:"changes"`
}

// Changed reports whether any record's verdict changed.
func (r *Report) Changed() bool { return r.NewlyDenied+r.NewlyAllowed > 0 }

// Group is the changed records of one outcome, recorded rule, candidate
// rule and reason, and identity.
type Group struct {
	Outcome   Outcome `json:"outcome"`
	OldRule   string  `json:"old_rule"`
	NewRule   string  `json:"new_rule"`
	NewReason string  `json:"new_reason,omitempty"`
	Identity  string  `json:"identity"`
	Count     int     `json:"count"`
	// Examples are the group's first records, at most Options.Examples.
	Examples []Entry `json:"examples"`
}

type groupKey struct {
	outcome                    Outcome
	oldRule, newRule, identity string
	newReason                  string
}

// count adds e to the report.
func (r *Replayer) count(e Entry) {
	r.rep.Records++
	switch e.Outcome {
	case Skipped:
		r.rep.Skipped[e.Skip]++
		return
	case NotRedecidable:
		r.rep.NotRedecidable[e.Missing.Fact]++
		return
	}
	r.rep.Redecidable++
	if e.Verified {
		r.rep.Verified++
	}
	switch e.Outcome {
	case Same:
		r.rep.Same++
		return
	case NewlyDenied:
		r.rep.NewlyDenied++
	case NewlyAllowed:
		r.rep.NewlyAllowed++
	}
	r.entries = append(r.entries, e)
	k := groupKey{outcome: e.Outcome, oldRule: e.Recorded.Rule, newRule: e.New.Rule, identity: e.Identity}
	if !e.New.Allow {
		k.newReason = string(e.New.Reason)
	}
	g := r.groups[k]
	if g == nil {
		g = &Group{Outcome: k.outcome, OldRule: k.oldRule, NewRule: k.newRule, NewReason: k.newReason, Identity: k.identity}
		r.groups[k] = g
	}
	g.Count++
	if len(g.Examples) < r.o.Examples {
		g.Examples = append(g.Examples, e)
	}
}

// Report returns the sums so far.
func (r *Replayer) Report() *Report {
	rep := r.rep
	rep.Changes = append([]Entry{}, r.entries...)
	rep.Groups = make([]*Group, 0, len(r.groups))
	for _, g := range r.groups {
		rep.Groups = append(rep.Groups, g)
	}
	sort.Slice(rep.Groups, func(i, j int) bool {
		a, b := rep.Groups[i], rep.Groups[j]
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		return fmt.Sprint(a.Outcome, a.OldRule, a.NewRule, a.Identity) < fmt.Sprint(b.Outcome, b.OldRule, b.NewRule, b.Identity)
	})
	return &rep
}

// Write prints the report for a reader: a summary line, then each group
// with its examples.
func (r *Report) Write(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%d records, %d re-decidable (%d verified under their own bundle), %d changed: %d newly denied, %d newly allowed; %d not re-decidable",
		r.Records, r.Redecidable, r.Verified, r.NewlyDenied+r.NewlyAllowed, r.NewlyDenied, r.NewlyAllowed, sum(r.NotRedecidable))
	if len(r.NotRedecidable) > 0 {
		b.WriteString(" (")
		for i, f := range sortedKeys(r.NotRedecidable) {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s %d", f, r.NotRedecidable[f])
		}
		b.WriteString(")")
	}
	fmt.Fprintf(&b, "; %d skipped\n", sum(r.Skipped))
	for _, u := range r.Unloaded {
		fmt.Fprintf(&b, "own bundle not loaded, its records unverified: %s\n", u)
	}
	for _, g := range r.Groups {
		fmt.Fprintf(&b, "\n%s: %d, identity %s, rule %s -> %s", strings.ReplaceAll(string(g.Outcome), "_", " "), g.Count, orNone(g.Identity), orNone(g.OldRule), orNone(g.NewRule))
		if g.NewReason != "" {
			fmt.Fprintf(&b, " (%s)", g.NewReason)
		}
		b.WriteString("\n")
		for _, e := range g.Examples {
			fmt.Fprintf(&b, "  seq %d %s %s %s\n", e.Seq, e.TS.UTC().Format("2006-01-02T15:04:05Z"), e.Kind, e.Target)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func sum[K comparable](m map[K]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
