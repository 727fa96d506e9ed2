package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
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
	xs := r.all(out)
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

// all are the explanations of the check whose output is out: one per
// decision, then the refusal made before the policy, if any.
func (r *explainRecorder) all(out checkOutput) []policy.Explanation {
	xs := r.explanations
	if f := out.refused; f != nil {
		xs = append(xs, r.ExplainRefusal(f.kind, policy.Identity{ID: out.Identity}, f.facts, f.err))
	}
	return xs
}

// explainMode is --explain: off, text (--explain) or json
// (--explain=json). It is a boolean flag that also takes "json".
type explainMode int

const (
	explainOff explainMode = iota
	explainText
	explainJSON
)

func (m *explainMode) String() string {
	if m != nil && *m == explainJSON {
		return "json"
	}
	return strconv.FormatBool(m != nil && *m == explainText)
}

func (m *explainMode) Set(v string) error {
	switch v {
	case "json":
		*m = explainJSON
		return nil
	case "text":
		*m = explainText
		return nil
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		return fmt.Errorf("--explain takes json, or no value for text; got %q", v)
	}
	*m = explainOff
	if on {
		*m = explainText
	}
	return nil
}

// IsBoolFlag lets --explain stand alone, as text.
func (m *explainMode) IsBoolFlag() bool { return true }

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
