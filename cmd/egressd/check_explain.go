package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/egressd/egressd/policy"
)

// explainRecorder explains every decision the check asks for (check
// --explain). Its Decide returns the explanation's decision, which is the
// engine's own Decide result (policy.Engine.Explain), so the text names
// the decision the check acted on, not a second evaluation.
type explainRecorder struct {
	checkEngine
	explanations []policy.Explanation
}

// Decide explains in and returns the decision explained.
func (r *explainRecorder) Decide(ctx context.Context, in policy.Input) policy.Decision {
	x := r.Explain(ctx, in)
	r.explanations = append(r.explanations, x)
	return x.Decision
}

// write prints the explanation of every decision, in order (an https://
// check: the CONNECT, then the request inside; sql: the login, then each
// statement), then a refusal made before the policy, the Rego inputs
// with --input, and last the check's result, which is the decision
// unless the entry point refused after the policy answered (a DNS type
// egressd never answers, a statement the gate refused with its query).
func (r *explainRecorder) write(w io.Writer, out checkOutput) error {
	xs := r.explanations
	if f := out.refused; f != nil {
		xs = append(xs, r.ExplainRefusal(f.kind, policy.Identity{ID: out.Identity}, f.facts, f.err))
	}
	var b strings.Builder
	for i := range xs {
		if i > 0 {
			b.WriteString("\n")
		}
		if err := xs[i].WriteText(&b); err != nil {
			return err
		}
	}
	if in, ok := out.Input.([]any); ok {
		j, err := json.MarshalIndent(in, "", "  ")
		if err != nil {
			return fmt.Errorf("encode rego input: %w", err)
		}
		fmt.Fprintf(&b, "\nrego input, as evaluated:\n%s\n", j)
	}
	b.WriteString("\nresult: " + resultText(out) + "\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write explanation: %w", err)
	}
	return nil
}

// resultText is the check's answer on one line, as its JSON says it.
func resultText(out checkOutput) string {
	s := "deny"
	if out.Allow {
		s = "allow"
	}
	s += " " + out.Reason.String() + ", rule " + cmp.Or(out.Rule, "none")
	if out.Inspect {
		s += ", inspect"
	}
	if out.Inspected {
		s += ", decided as inside an inspected tunnel"
	}
	if out.Detail != "" {
		s += " (" + out.Detail + ")"
	}
	if out.Assumes != "" {
		s += "; assumes " + out.Assumes
	}
	return s
}
