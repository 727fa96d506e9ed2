package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/egressd/egressd/dnsguard"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlfacts"
)

// Engine is what a replay asks of a bundle: *policy.Engine.
type Engine interface {
	policy.Decider
	policy.BodyNeeder
}

// Env is what deciding a Case needs besides the bundle: the same config
// the listeners ran with.
type Env struct {
	// Floor is the address floor of the config's internal: entries.
	Floor policy.Floor
	// Identity gives the identity an id stands for, with its attributes;
	// false when the config has no such identity. If nil, every id stands
	// for itself without attributes (a config with no identities).
	Identity func(id string) (policy.Identity, bool)
	// SQL are the Postgres gate's parse options (search path, limits);
	// Database is taken from each record.
	SQL sqlfacts.Options
}

// Result is a Case decided.
type Result struct {
	// Decision is the verdict the listener would record; a refusal before
	// the policy (a parse, the floor) has its reason and no rule.
	Decision policy.Decision
	// Inputs are the inputs the bundle was asked, in order (an inspected
	// request: its CONNECT, then the request), for explaining the
	// decision; none when it was refused before the policy.
	Inputs []policy.Input
	// Facts are the request's facts, nil when they could not be built.
	Facts policy.Facts
}

// recorder keeps every input a decision asks the bundle about.
type recorder struct {
	Engine
	inputs []policy.Input
}

func (r *recorder) Decide(ctx context.Context, in policy.Input) policy.Decision {
	r.inputs = append(r.inputs, in)
	return r.Engine.Decide(ctx, in)
}

// identity is the identity of c, or a *Missing.
func (e *Env) identity(id string) (policy.Identity, error) {
	if e.Identity == nil {
		return policy.Identity{ID: id}, nil
	}
	ident, ok := e.Identity(id)
	if !ok {
		return policy.Identity{}, &Missing{Fact: FactIdentity, Detail: fmt.Sprintf("identity %q is not in the config", id)}
	}
	return ident, nil
}

// Decide decides c against eng with the listeners' own code: the proxy's
// pre-dial path for http, redirect and connect (an inspected request as
// `egressd check http` decides an https:// URL), the DNS server's checks
// before a lookup, the Postgres gate's login or statement decision. An
// error is a *Missing: the identity is unknown, or the recorded SQL does
// not re-parse into one statement with the same facts.
func (e *Env) Decide(ctx context.Context, eng Engine, c Case) (Result, error) {
	id, err := e.identity(c.Identity)
	if err != nil {
		return Result{}, err
	}
	rec := &recorder{Engine: eng}
	var res Result
	switch c.Kind {
	case policy.KindHTTP, policy.KindRedirect:
		d := policy.PreDial{Engine: rec, Floor: e.Floor}
		var o policy.Outcome
		if c.Inspected {
			o = d.DecideRequest(ctx, id, c.Kind, c.Request)
		} else {
			o = d.DecideHTTP(ctx, id, c.Kind, c.Request)
		}
		res = Result{Decision: o.Decision, Facts: o.Facts}
	case policy.KindConnect:
		d := policy.PreDial{Engine: rec, Floor: e.Floor}
		o := d.DecideConnect(ctx, id, c.Authority)
		res = Result{Decision: o.Decision, Facts: o.Facts}
	case policy.KindDNS:
		facts, d, err := dnsguard.Decide(ctx, rec, id, c.Name, c.QType)
		var de *policy.DenyError
		if errors.As(err, &de) {
			d = policy.Decision{Reason: de.Reason}
		} else if err != nil {
			d = policy.Decision{Reason: policy.ReasonMalformedName}
		}
		res = Result{Decision: d}
		if facts != nil {
			res.Facts = facts
		}
	case policy.KindSQL:
		if res, err = e.decideSQL(ctx, rec, id, c); err != nil {
			return Result{}, err
		}
	default:
		return Result{}, ErrNotDecision
	}
	res.Inputs = rec.inputs
	return res, nil
}

// decideSQL decides a login (no SQL) or one recorded statement. The
// statement is decided alone, as the gate decides each statement of a
// query; its session's login is its own record.
func (e *Env) decideSQL(ctx context.Context, eng policy.Decider, id policy.Identity, c Case) (Result, error) {
	if c.SQL == "" {
		st := sqlfacts.Connect(c.Database)
		return Result{Decision: eng.Decide(ctx, policy.Input{Identity: id, Facts: st}), Facts: st}, nil
	}
	opt := e.SQL
	opt.Database, opt.Tokens = c.Database, nil
	sts, err := sqlfacts.ParseContext(ctx, c.SQL, opt)
	if err != nil {
		return Result{}, &Missing{Fact: FactSQLText, Detail: "the recorded (normalized) statement does not parse: " + err.Error()}
	}
	if len(sts) != 1 {
		return Result{}, &Missing{Fact: FactSQLText, Detail: fmt.Sprintf("the recorded statement parses as %d statements", len(sts))}
	}
	if sts[0].ConstantFacts {
		return Result{}, &Missing{Fact: FactSQLText, Detail: "a fact was read from a literal, which the recorded text replaces by $n"}
	}
	d := eng.Decide(ctx, policy.Input{Identity: id, Facts: sts[0]})
	if !d.Allow && d.Reason == "" {
		d.Reason = policy.ReasonNoMatchingRule
	}
	return Result{Decision: d, Facts: sts[0]}, nil
}
