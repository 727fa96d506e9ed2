package pggate

import (
	"context"
	"strings"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlfacts"
)

// Reasons for the gate's own bounds.
const (
	// reasonTooManyStatements denies a Query or Parse with more than
	// max_statements statements, with one audit record for all of them.
	reasonTooManyStatements = string(policy.ReasonTooManyStatements)
	// reasonSessionLimit refuses a login past max_sessions or
	// max_sessions_per_identity.
	reasonSessionLimit = string(policy.ReasonSessionLimit)
)

// verdictFor is the uncached decision on text: the statement cap, then
// evaluate. The count runs before the parser so that a megabyte of `;`
// costs one linear scan and one audit record, not a parse and a record per
// statement; the check after evaluate holds the cap even where the scan
// and the parser disagree.
func (g *Gate) verdictFor(ctx context.Context, ident policy.Identity, db, prefix string, cat *sqlfacts.Catalog, text string) *verdict {
	// Without a ';' there is at most one statement: no scan needed.
	if strings.IndexByte(text, ';') >= 0 && sqlfacts.CountStatements(text, g.cfg.MaxStatements) > g.cfg.MaxStatements {
		return g.refused(ctx, &policy.DenyError{Reason: policy.ReasonTooManyStatements}, text)
	}
	v := g.evaluate(ctx, ident, db, prefix, cat, text)
	if len(v.stmts) > g.cfg.MaxStatements {
		return g.refused(ctx, &policy.DenyError{Reason: policy.ReasonTooManyStatements}, text)
	}
	return v
}
