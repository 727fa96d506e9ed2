package pggate

import (
	"context"
	"strings"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlfacts"
)

// verdictFor is the uncached decision on text: the statement cap, then
// evaluate. The count (on PostgreSQL's scanner's `;` tokens) runs before
// the parser so that a megabyte of `;` costs one linear scan and one audit
// record, not a parse and a record per statement; the check after evaluate
// holds the cap even where the scan and the parser disagree.
func (g *Gate) verdictFor(ctx context.Context, ident policy.Identity, db, prefix string, cat *sqlfacts.Catalog, text string) *verdict {
	// A text of a cached shape has the statements of the text that
	// filled it; without a ';' there is at most one statement: no scan
	// needed.
	if _, _, hit := g.shapeHit(prefix, g.engine().Digest(), cat, text); hit != nil && len(hit.stmts) <= g.cfg.MaxStatements {
		return hit
	}
	if strings.IndexByte(text, ';') >= 0 {
		n, err := sqlfacts.CountStatements(text)
		if err != nil {
			return g.refused(ctx, &policy.DenyError{Reason: policy.ReasonSQLParseError, Err: err}, text)
		}
		if n > g.cfg.MaxStatements {
			return g.refused(ctx, &policy.DenyError{Reason: policy.ReasonSQLTooManyStatements}, text)
		}
	}
	v := g.evaluate(ctx, ident, db, prefix, cat, text)
	if len(v.stmts) > g.cfg.MaxStatements {
		return g.refused(ctx, &policy.DenyError{Reason: policy.ReasonSQLTooManyStatements}, text)
	}
	return v
}
