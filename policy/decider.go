package policy

import "context"

// Decider decides inputs and names the bundle that answers them. It is
// what every listener (proxy, DNS, Postgres) and `egressd check` need of
// *Engine; declared once here so that tests and wrappers (check --input's
// recorder) have one shape to fill.
type Decider interface {
	// Decide answers in; it never fails: what cannot be decided is a deny
	// whose reason says why.
	Decide(ctx context.Context, in Input) Decision
	// Digest identifies the active bundle ("sha256:…"), for records of
	// refusals made before the policy was asked.
	Digest() string
}

var _ Decider = (*Engine)(nil)

// BodyNeeder is the Decider that may decide on request bodies: it says
// what to read of one before deciding it. A Decider without it decides
// every request on its request line.
type BodyNeeder interface {
	NeedBody(f *URLFacts) BodyNeed
}

var _ BodyNeeder = (*Engine)(nil)
