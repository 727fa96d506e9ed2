package main

import (
	"context"

	"github.com/egressd/egressd/policy"
)

// checkEngine is what a check asks of the policy: *policy.Engine, or an
// inputRecorder in front of it.
type checkEngine interface {
	policy.Decider
	policy.BodyNeeder
	RegoInput(in policy.Input) (any, error)
	Explain(ctx context.Context, in policy.Input) policy.Explanation
	ExplainRefusal(kind policy.Kind, id policy.Identity, facts policy.Facts, err error) policy.Explanation
	GrantOf(rule string) (policy.Grant, bool)
}

// inputRecorder keeps the Rego input of every decision the check asks
// for (check --input). The input comes from the engine's own builder
// (policy.Engine.RegoInput), so what it prints is what Rego evaluated,
// not a second rendering of the facts.
type inputRecorder struct {
	checkEngine
	inputs []any
}

// Decide records in's Rego input, then decides it. An input Decide
// refuses without evaluating (no entry point) is not recorded: the
// policy saw nothing.
func (r *inputRecorder) Decide(ctx context.Context, in policy.Input) policy.Decision {
	if v, err := r.RegoInput(in); err == nil {
		r.inputs = append(r.inputs, v)
	}
	return r.checkEngine.Decide(ctx, in)
}
