package policy

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

// Explanation says why the active bundle decided one input as it did: the
// facts, the base refusal that fired, each candidate rule with the result
// of each of its conditions, and the decision, which is always the one
// Decide returned (or the refusal made before the policy was asked),
// never a second evaluation of the rules.
//
// Host and path results come from the rule index that builds input.views
// (the same lookup and glob matchers); port, identity and method results
// read the same view fields the bundle's Rego reads (ports, identities /
// any_identity, methods / any_method), and a test keeps the two agreeing:
// read in each entry point's order (for http, the first candidate that
// Matches), the candidates give the decision Decide returned.
type Explanation struct {
	Kind     Kind     `json:"kind"`
	Identity Identity `json:"identity"`
	// Facts are the input's facts as `egressd check` prints them (a
	// Facts value, or what the caller knew of a request refused before
	// the policy); nil when the request did not parse.
	Facts any `json:"facts"`
	// Flags are input.flags, the refusal facts the base rules read (for
	// sql, the statement's flags).
	Flags []string `json:"flags,omitempty"`
	// Refusal is the refusal found before any rule: input.flags[0], or
	// a refusal made in Go before the policy was asked. Nil when none.
	Refusal *Refusal `json:"refusal,omitempty"`
	// Checks are the kind's conditions outside the rules (dns: qtype and
	// data.dns.names; sql: profile, database, the refusals of every
	// profile and of the profile), as far as the bundle names them.
	Checks []Condition `json:"checks,omitempty"`
	// Candidates are the rules that could decide: every rule whose host
	// matches, then rules that miss only on host under the same
	// registrable domain, in the order the policy tries them, at most
	// MaxCandidates (the rule the decision names is always kept).
	Candidates []Candidate `json:"candidates"`
	// Omitted counts the candidates left out.
	Omitted int `json:"omitted,omitempty"`
	// BodyDenials are the refusals of the bundle's own body rules
	// (package egress.body); the http entry point takes the least.
	BodyDenials []Decision `json:"body_denials,omitempty"`
	// Decision is the answer: Decide's, or the refusal made before it.
	Decision Decision `json:"decision"`
}

// Refusal is a refusal that precedes every rule.
type Refusal struct {
	Reason Reason `json:"reason"`
	// Detail says what was refused (a refusal before the policy).
	Detail string `json:"detail,omitempty"`
	// BeforePolicy says Go refused the request before the policy was
	// asked (a parse error, the address floor); otherwise the refusal is
	// input.flags[0], refused by the bundle's base rules.
	BeforePolicy bool `json:"before_policy,omitempty"`
	// Fired says the decision is this refusal: false when the bundle let
	// a flag pass.
	Fired bool `json:"fired"`
}

// Candidate is one rule and how the request fares against it.
type Candidate struct {
	// Rule is the rule's id and Index its position in data.rules.
	Rule  string `json:"rule"`
	Index int    `json:"index"`
	// Deny marks an "action": "deny" rule.
	Deny bool `json:"deny,omitempty"`
	// Conditions are the rule's conditions in the order they are shown:
	// host, port, then per kind method, path and body (http), tunnel
	// (connect), action (dns), and identity.
	Conditions []Condition `json:"conditions"`
	// Matches says every condition but body holds: the policy takes the
	// first candidate that matches.
	Matches bool `json:"matches"`
	// Verdict is what the rule decides when it is the one taken: its
	// allow, rule_deny, or the refusal its body condition gives.
	Verdict Decision `json:"verdict"`
	// Decided marks the rule the decision names.
	Decided bool `json:"decided,omitempty"`
}

// Condition is one condition of a rule, or of the entry point.
type Condition struct {
	// Name is the condition: host, port, method, path, identity, body,
	// tunnel, action, qtype, profile, …
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Got is the request's value and Want what the rule says.
	Got  string `json:"got"`
	Want string `json:"want,omitempty"`
	// Reason is the refusal a failed condition gives, when it gives one
	// of its own (a body condition, a check).
	Reason Reason `json:"reason,omitempty"`
}

// MaxCandidates bounds Explanation.Candidates.
const MaxCandidates = 12

// Explain decides in with the active bundle, exactly as Decide does, and
// says why. Explanation.Decision is Decide's result for in.
func (e *Engine) Explain(ctx context.Context, in Input) Explanation {
	x := Explanation{Identity: in.Identity, Decision: e.Decide(ctx, in)}
	if in.Facts == nil {
		return x
	}
	x.Facts, x.Kind = in.Facts, in.Facts.Kind()
	e.cur.explain(ctx, &x, in, e.cfg.EvalTimeout)
	return x
}

// ExplainRefusal explains a refusal made in Go before the policy was
// asked: err (a *DenyError; another error is malformed_request) for a
// request of kind whose facts, as far as they were computed, are facts
// (nil when it did not parse). The rules for its host are listed as they
// stand, though none was asked.
func (e *Engine) ExplainRefusal(kind Kind, id Identity, facts Facts, err error) Explanation {
	r := &Refusal{Reason: ReasonMalformedRequest, BeforePolicy: true, Fired: true}
	var de *DenyError
	if errors.As(err, &de) {
		r.Reason, r.Detail = de.Reason, de.Detail
	} else if err != nil {
		r.Detail = err.Error()
	}
	x := Explanation{Kind: kind, Identity: id, Refusal: r, Decision: Decision{Reason: r.Reason, Policy: e.cur.digest}}
	if facts != nil {
		x.Facts = facts
		e.cur.explain(context.Background(), &x, Input{Identity: id, Facts: facts}, e.cfg.EvalTimeout)
	}
	return x
}

// explain fills x's flags, checks and candidates for in, whose decision
// (and refusal before the policy, if any) x already holds. Each query of
// the bundle it makes is bounded by timeout, as an evaluation is.
func (c *compiled) explain(ctx context.Context, x *Explanation, in Input, timeout time.Duration) {
	kind := in.Facts.Kind()
	if kind == 0 || int(kind) >= len(c.queries) || c.queries[kind] == nil {
		return
	}
	q := func(ref string, input ast.Object) any {
		qctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return c.query(qctx, ref, input)
	}
	before := x.Refusal != nil && x.Refusal.BeforePolicy
	input := c.input(kind, in)
	x.Flags = stringsOf(input.Get(termFlags))
	if len(x.Flags) > 0 && !before {
		first := Reason(x.Flags[0])
		x.Refusal = &Refusal{Reason: first, Fired: !x.Decision.Allow && x.Decision.Reason == first}
	}
	var cands []candidate
	switch f := in.Facts.(type) {
	case *URLFacts:
		cands = c.views.explainRequest(f, in.Identity)
		if !before {
			x.BodyDenials = c.bodyDenials(q, input)
		}
	case *ConnectFacts:
		cands = c.views.explainConnect(f, in.Identity)
	default:
		switch kind {
		case KindDNS:
			host, _ := termString(input.Get(termHost))
			cands = c.views.explainDNS(host, in.Identity)
			x.Checks = dnsChecks(q, input)
		case KindSQL:
			x.Checks = sqlChecks(q, input)
			x.Flags = stringsOfAny(q("data.egress.sql.flags", input))
		}
	}
	x.Candidates, x.Omitted = pick(cands, x.Decision)
}

// candidate is a Candidate with the order the policy tries it in.
type candidate struct {
	Candidate
	group, order int
}

// pick sorts cands into the policy's order, marks the one the decision
// names and keeps at most MaxCandidates, the decided one always among
// them.
func pick(cands []candidate, d Decision) ([]Candidate, int) {
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].group != cands[j].group {
			return cands[i].group < cands[j].group
		}
		return cands[i].order < cands[j].order
	})
	var out []Candidate
	decided := false
	for i := range cands {
		cd := cands[i].Candidate
		if !decided && d.Rule != "" && cd.Rule == d.Rule {
			cd.Decided, decided = true, true
		}
		if len(out) < MaxCandidates || cd.Decided {
			out = append(out, cd)
		}
	}
	return out, len(cands) - len(out)
}

// queryFunc is compiled.query bounded by the evaluation timeout.
type queryFunc func(ref string, input ast.Object) any

// query evaluates ref (a reference into the bundle, such as
// data.egress.sql.profile_name) against input, for what an explanation
// shows beside the decision. An undefined ref, or one the bundle does not
// have, is nil: explanations show what the bundle names.
func (c *compiled) query(ctx context.Context, ref string, input ast.Object) any {
	if c.comp == nil {
		return nil
	}
	r := rego.New(rego.Query(ref), rego.Compiler(c.comp), rego.Capabilities(c.comp.Capabilities()),
		rego.Store(c.store), rego.ParsedInput(input))
	rs, err := r.Eval(ctx)
	if err != nil || len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return nil
	}
	return rs[0].Expressions[0].Value
}

// bodyDenials are the bundle's own body refusals of an http input
// (data.egress.body.deny), least first as the entry point takes them.
func (c *compiled) bodyDenials(q queryFunc, input ast.Object) []Decision {
	list, _ := q("sort([[d.reason, d.rule] | some d in data.egress.body.deny])", input).([]any)
	var out []Decision
	for _, v := range list {
		pair, _ := v.([]any)
		if len(pair) != 2 {
			continue
		}
		reason, _ := pair[0].(string)
		rule, _ := pair[1].(string)
		out = append(out, Decision{Reason: Reason(reason), Rule: rule, Policy: c.digest})
	}
	return out
}

// stringsOf reads an array term of strings.
func stringsOf(t *ast.Term) []string {
	if t == nil {
		return nil
	}
	a, ok := t.Value.(*ast.Array)
	if !ok {
		return nil
	}
	out := make([]string, 0, a.Len())
	for i := range a.Len() {
		if s, ok := termString(a.Elem(i)); ok {
			out = append(out, s)
		}
	}
	return out
}

// stringsOfAny reads a query's list of strings.
func stringsOfAny(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, e := range list {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
