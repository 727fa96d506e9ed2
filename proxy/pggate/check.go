package pggate

import (
	"context"

	"go.uber.org/zap"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlfacts"
)

// QueryDecision is the gate's answer to one query text.
type QueryDecision struct {
	// Decision is the whole query's: allowed only if every statement is,
	// else the first denied statement's reason and rule.
	policy.Decision
	// Connect is the decision on the session itself (may the identity use
	// the database); when it denies, no statement is decided.
	Connect policy.Decision
	// Statements are the per-statement decisions in order, as audited: a
	// statement allowed on its own but not run because another was denied
	// has reason other_statement_denied. SQL is the normalized text. Empty
	// when the query was refused before parsing.
	Statements []StatementDecision
}

// StatementDecision is one statement's audited decision.
type StatementDecision struct {
	SQL string `json:"sql"`
	policy.Decision
}

// DecideQuery decides text for ident on database db by the gate's own code
// — the connect decision, the statement cap, the pre-scan, the parser and
// egress.sql, with the same reasons — without a network session, verdict
// cache or audit; cat is the database's catalog (nil: built-ins only). `egressd check sql` calls it so that its answer cannot
// drift from what a session gets. cfg need not enable the listener.
func DecideQuery(ctx context.Context, cfg Config, engine policy.Decider, ident policy.Identity, db string, cat *sqlfacts.Catalog, text string) QueryDecision {
	cfg.Provision()
	g := &Gate{cfg: cfg, log: zap.NewNop(), limits: limitsOf(cfg)}
	g.cur.Store(&current{engine: engine})
	st := connectStatement(db)
	out := QueryDecision{Connect: engine.Decide(ctx, policy.Input{Identity: ident, Facts: st})}
	if !out.Connect.Allow {
		out.Decision = out.Connect
		return out
	}
	v := g.verdict(ctx, query{ident: ident, db: db, prefix: cacheKeyPrefix(ident, db), cat: cat, text: text})
	out.Decision = policy.Decision{Allow: v.allow, Reason: v.reason, Policy: engine.Digest()}
	if v.allow {
		out.Reason = policy.ReasonAllowed
	}
	for _, a := range v.stmts {
		if v.refused {
			// A refusal before the parser: no statement to show.
			out.Policy = a.policyID
			break
		}
		d := a.decision()
		if !v.allow && out.Rule == "" && a.reason == v.reason {
			out.Rule = a.rule
		}
		if v.allow && out.WouldDeny == nil && d.WouldDeny != nil {
			// The query ran because an observe mode let this statement
			// through: it speaks for the query.
			out.Rule, out.WouldDeny = d.Rule, d.WouldDeny
		}
		out.Statements = append(out.Statements, StatementDecision{SQL: a.sql, Decision: d})
	}
	return out
}

// limitsOf is what cfg lets the parser see.
func limitsOf(cfg Config) sqlfacts.Limits {
	return sqlfacts.Limits{MaxLen: cfg.MaxQueryBytes, MaxDepth: cfg.MaxNesting, MaxOps: cfg.MaxOperators}
}

// connectStatement is the facts of "may this session use db": a connect
// with no relations.
func connectStatement(db string) *sqlfacts.Statement {
	return sqlfacts.Connect(db)
}
