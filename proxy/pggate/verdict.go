package pggate

import (
	"context"
	"strings"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlfacts"
	"github.com/egressd/egressd/policy/sqlparse"
)

// verdict is the decision on one query text: all its statements, or none.
// Verdicts are immutable once cached.
type verdict struct {
	allow  bool
	reason policy.Reason
	stmts  []stmtAudit
	// cacheable is false when a decision may differ on retry (policy
	// timeout or error).
	cacheable bool
	// refused is set when the text never reached the policy (the
	// pre-scan, the parser or a bound refused it): its one audit line
	// is the query's, not a statement's.
	refused bool
	// effects are the named objects an allowed text creates and drops
	// (effectsOf), read once per exact text.
	effects []effect
}

// stmtAudit is one statement's audit line: normalized SQL (no literals),
// its fingerprint and decision.
type stmtAudit struct {
	sql, fingerprint string
	allow            bool
	reason           policy.Reason
	rule, policyID   string
	// wouldDeny is set on a statement an observe mode let run.
	wouldDeny *policy.Observed
}

// decision is a's decision as the engine gave it, for its record and
// `egressd check sql`: an allow keeps what an observe mode let through.
func (a *stmtAudit) decision() policy.Decision {
	d := policy.Decision{Allow: a.allow, Reason: a.reason, Rule: a.rule, Policy: a.policyID}
	if a.allow {
		d.WouldDeny = a.wouldDeny
	}
	return d
}

// query is one text to decide and who asks.
type query struct {
	ident policy.Identity
	// db is the session's database and prefix its cacheKeyPrefix.
	db, prefix string
	// cat is db's catalog; nil: built-ins only.
	cat  *sqlfacts.Catalog
	text string
	// client, if set, gives the context of a parse in a worker in place
	// of the caller's: one that ends when the client leaves.
	client leaver
}

// leaver is a client that may leave while its text is decided
// (*session). An interface rather than a func value: the method value
// would cost an allocation on every decision, cached ones too.
type leaver interface {
	clientGone() (ctx context.Context, stop func())
}

// verdict is the gate's one decision path on a query text, for sessions
// and `egressd check sql` (DecideQuery) alike, unaudited: the verdict
// cached under the exact text; else, within the statement cap, the one
// cached under its shape; else evaluate (pre-scan, the verdict cached
// under the normalized form, parse, policy), stored under the exact text
// when it may be. A verdict's audit SQL and effects are always this exact
// text's own (see forText).
func (g *Gate) verdict(ctx context.Context, q query) *verdict {
	sc := cacheScope{prefix: q.prefix, digest: g.engine().Digest(), catalog: q.cat.Digest()}
	if v, ok := g.verdicts.byText(sc, q.text); ok {
		return v
	}
	if q.client != nil && !sqlparse.InProcess(q.text) {
		// A worker parse can take a while: stop it if the client
		// leaves meanwhile.
		var stop func()
		ctx, stop = q.client.clientGone()
		defer stop()
	}
	// Worker parses are shared per identity in turn (issue 21 item 6).
	ctx = sqlparse.WithIdentity(ctx, q.ident.ID)
	v := g.capped(ctx, sc, q)
	if v.cacheable {
		g.verdicts.storeText(sc, q.text, v)
	}
	return v
}

// capped is the verdict on a text not cached by its exact text, held to
// the statement cap. The count (on PostgreSQL's scanner's `;` tokens) runs
// before the parser so that a megabyte of `;` costs one linear scan and one
// audit record, not a parse and a record per statement; the check after
// evaluate holds the cap even where the scan and the parser disagree.
func (g *Gate) capped(ctx context.Context, sc cacheScope, q query) *verdict {
	// The Go-computed shape saves every cgo call for texts of a known
	// shape (see shapeOf for why that is sound): a text of a cached shape
	// has the brackets, operators and words, and so the statements and
	// the pre-scan's outcome, of the text that was scanned and parsed to
	// fill it; only its length differs.
	sl := g.verdicts.byShape(sc, q.text)
	var v *verdict
	if sl.cached != nil && len(q.text) <= g.cfg.MaxQueryBytes {
		v = forShape(sl.cached, sl.shape)
	}
	if v != nil && len(v.stmts) <= g.cfg.MaxStatements {
		return v
	}
	if strings.IndexByte(q.text, ';') >= 0 {
		n, err := sqlfacts.CountStatements(q.text)
		if err != nil {
			return g.refused(ctx, &policy.DenyError{Reason: policy.ReasonSQLParseError, Err: err}, q.text)
		}
		if n > g.cfg.MaxStatements {
			return g.refused(ctx, &policy.DenyError{Reason: policy.ReasonSQLTooManyStatements}, q.text)
		}
	}
	if v == nil {
		v = g.evaluate(ctx, sc, sl, q)
	}
	if len(v.stmts) > g.cfg.MaxStatements {
		return g.refused(ctx, &policy.DenyError{Reason: policy.ReasonSQLTooManyStatements}, q.text)
	}
	return v
}
