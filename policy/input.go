package policy

import (
	"errors"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
)

// errNoInput says Decide answers in without evaluating any Rego.
var errNoInput = errors.New("no entry point evaluates this input")

// input is the Rego input of in under this bundle: kind, identity, the
// facts' fields and input.views. Decide evaluates exactly this object and
// RegoInput prints it, so `egressd check --input` shows what the policy saw.
func (c *compiled) input(kind Kind, in Input) ast.Object {
	obj := buildInput(kind, in, c.identities.get(in.Identity))
	c.views.addTo(obj, in.Facts)
	return obj
}

// RegoInput is the input Decide evaluates for in with the active bundle,
// as JSON values (map[string]any, []any, json.Number, string, bool). It
// fails when Decide would deny without evaluating (no facts, or no entry
// point for their kind).
func (e *Engine) RegoInput(in Input) (any, error) {
	c := e.cur
	if in.Facts == nil {
		return nil, fmt.Errorf("rego input: %w: no facts", errNoInput)
	}
	kind := in.Facts.Kind()
	if kind == 0 || int(kind) >= len(c.queries) || c.queries[kind] == nil {
		return nil, fmt.Errorf("rego input of kind %s: %w", kind, errNoInput)
	}
	v, err := ast.JSON(c.input(kind, in))
	if err != nil {
		return nil, fmt.Errorf("rego input of kind %s: %w", kind, err)
	}
	return v, nil
}
