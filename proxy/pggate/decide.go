package pggate

import (
	"context"
	"errors"
	"slices"
	"strings"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlfacts"
	"github.com/egressd/egressd/policy/sqlparse"
)

// decide returns the verdict on text for this session, audited: the
// decision (Gate.verdict) is cached per identity, database, bundle digest
// and catalog; audit records are written every time.
func (s *session) decide(text string) *verdict {
	g := s.g
	if v := s.freshCatalog(); v != nil {
		return v
	}
	v := g.verdict(context.Background(), query{
		ident: s.identity, db: s.database, prefix: s.keyPrefix, cat: s.catalog.load(), text: text, client: s,
	})
	for i := range v.stmts {
		a := &v.stmts[i]
		if err := g.deps.Audit.Append(s.record(audit.VerdictOf(a.decision()), a.sql, a.fingerprint)); err != nil {
			return s.auditFailed(err, a)
		}
	}
	return v
}

// evaluate parses and decides q.text, which no cached verdict serves
// as is (sl is its shape's lookup), with db's catalog q.cat. Parsing is
// through package sqlparse, which keeps a crash of libpg_query out of this
// process; ctx ends a parse in a worker.
func (g *Gate) evaluate(ctx context.Context, sc cacheScope, sl shapeLookup, q query) *verdict {
	text := q.text
	toks, err := sqlfacts.PrescanTokens(text, g.limits)
	if err != nil {
		return g.refused(ctx, err, text)
	}
	if sl.cached != nil {
		if tv := forText(sl.cached, text, toks); tv != nil {
			return tv
		}
	}
	// The normalized form is the text's sqlparse.Key, made from the
	// pre-scan's tokens without a parse. Facts carry no literal values, so
	// every text with this key gets the same verdict
	// (TestNormalizedTextDeterminesFacts in sqlfacts), except texts whose
	// facts were or could have been read from literals, which are never
	// stored here (see below).
	norm := sqlparse.Key(text, toks)
	if v := g.verdicts.byNormalized(sc, norm); v != nil {
		if tv := forText(v, text, toks); tv != nil {
			g.verdicts.storeShape(sc, sl, norm, v)
			return tv
		}
	}
	opt := g.parseOptions(q.db, q.cat)
	opt.Tokens = toks
	sts, err := sqlfacts.ParseContext(ctx, text, opt)
	if err != nil {
		return g.refused(ctx, err, text)
	}
	v := &verdict{allow: true, cacheable: true, stmts: make([]stmtAudit, 0, len(sts))}
	// A fact read from a constant (a sequence or relation named by a
	// string, a bounded setting's value) breaks the premise of the shape
	// and normalized caches: texts that differ only in constants would
	// share a verdict, and the first would decide the rest. Such texts are
	// cached by their exact text only.
	shared := true
	for _, st := range sts {
		if st.ConstantFacts {
			shared = false
		}
		d := g.engine().Decide(ctx, policy.Input{Identity: q.ident, Facts: st})
		if r := d.Reason; r == policy.ReasonPolicyTimeout || r == policy.ReasonPolicyError || r == policy.ReasonClientClosed {
			v.cacheable = false
		}
		// The audit text is the statement redacted from its tokens and
		// checked against its tree (Normalize keeps the literals of
		// utility statements); the fingerprint is of that text, since a
		// fingerprint of the literals would let a reader test guesses.
		a := stmtAudit{allow: d.Allow, reason: d.Reason, rule: d.Rule, policyID: d.Policy, wouldDeny: d.WouldDeny, sql: auditSQL(st.AuditSQL)}
		if a.sql != sqlfacts.RedactionFailed && sqlparse.InProcess(st.AuditSQL) {
			a.fingerprint, _ = sqlparse.Fingerprint(ctx, st.AuditSQL)
		}
		if !d.Allow {
			a.reason = sanitizeReason(a.reason)
			if v.allow {
				v.allow, v.reason = false, a.reason
			}
		}
		v.stmts = append(v.stmts, a)
	}
	if !v.allow {
		for i := range v.stmts {
			if v.stmts[i].allow {
				v.stmts[i].allow, v.stmts[i].reason = false, policy.ReasonOtherStatementDenied
			}
		}
	} else {
		v.effects = statementEffects(text, sqlfacts.Statements(text, toks))
	}
	if v.cacheable && shared {
		g.verdicts.storeNormalized(sc, norm, v)
		g.verdicts.storeShape(sc, sl, norm, v)
	}
	return v
}

// parseOptions are the options the gate parses a session's text with.
func (g *Gate) parseOptions(db string, cat *sqlfacts.Catalog) sqlfacts.Options {
	return sqlfacts.Options{Database: db, SearchPath: []string{g.cfg.SearchPath}, Limits: g.limits, Catalog: cat}
}

// maxAuditSQL bounds the SQL text of one audit record: the writer refuses
// a record past 128 KiB (and then denies audit_unavailable), and a 1 MiB
// query's redacted text is up to four times as long.
const maxAuditSQL = 32 << 10

// auditSQL is redacted SQL cut to maxAuditSQL bytes, at a character
// boundary, marked with a trailing "…". Cutting redacted text anywhere is
// safe: it holds no literal to cut in half.
func auditSQL(red string) string {
	if len(red) <= maxAuditSQL {
		return red
	}
	cut := maxAuditSQL
	for cut > 0 && !utf8.RuneStart(red[cut]) {
		cut--
	}
	return red[:cut] + "…"
}

// forText is v, a verdict cached under a shape or normalized form, made
// the verdict of this exact text, given its tokens: its audit SQL redacted
// from this text's own statements by PostgreSQL's scanner — never the SQL
// of the text that first filled the shared key, whose literals are not
// this text's — and the objects this text creates. nil when this text's
// statements do not line up with v's (a BEGIN ATOMIC body holds `;`): the
// caller then decides the text whole.
func forText(v *verdict, text string, toks []sqlparse.Token) *verdict {
	stmts := sqlfacts.Statements(text, toks)
	if len(stmts) != len(v.stmts) {
		return nil
	}
	out := *v
	out.stmts = slices.Clone(v.stmts)
	for i, st := range stmts {
		out.stmts[i].sql = auditSQL(strings.TrimRight(strings.TrimSpace(sqlparse.RedactTokens(text, st.Toks)), ";"))
	}
	out.effects = nil
	if out.allow {
		out.effects = statementEffects(text, stmts)
	}
	return &out
}

// refused is the verdict for text that never reached the policy. Its audit
// line has the text redacted on PostgreSQL's scanner's tokens, and no SQL
// when the scanner refuses the text or it is past the length limit: a deny
// must not log literals either.
func (g *Gate) refused(ctx context.Context, err error, text string) *verdict {
	reason := policy.ReasonSQLParseError
	var de *policy.DenyError
	if errors.As(err, &de) {
		reason = sanitizeReason(de.Reason)
	}
	if errors.Is(err, sqlparse.ErrCrashed) {
		// The error names how the worker ended, never the text (a
		// syntax error's message would quote it, so only crashes are
		// logged).
		g.log.Warn("sql parser worker failed; statement denied", zap.Stringer("reason", reason), zap.Error(err))
	}
	var sql string
	if (reason == policy.ReasonSQLParseError || reason == policy.ReasonSQLTooComplex) && len(text) <= g.cfg.MaxQueryBytes {
		if red, err := sqlparse.Redact(text); err == nil {
			sql = auditSQL(strings.TrimRight(strings.TrimSpace(red), ";"))
		}
	}
	digest := g.engine().Digest()
	// A parse the client abandoned or the worker ran out of time on may
	// succeed next time; a crash or a syntax error will not.
	cacheable := !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
	return &verdict{reason: reason, cacheable: cacheable, refused: true,
		stmts: []stmtAudit{{sql: sql, reason: reason, policyID: digest}}}
}

// auditFailed is the verdict when the log did not take statement a's
// record: nothing runs. An identity over its audit budget (audit.Meter) is
// refused audit_budget_exceeded, a refusal the meter counts rather than
// writes, so one identity's flood cannot deny the others; any other
// failure is audit_unavailable.
func (s *session) auditFailed(err error, a *stmtAudit) *verdict {
	if errors.Is(err, audit.ErrOverBudget) {
		if derr := s.audit(policy.Decision{Reason: policy.ReasonAuditBudgetExceeded, Rule: a.rule, Policy: a.policyID}, a.sql, a.fingerprint); derr != nil && !errors.Is(derr, audit.ErrOverBudget) {
			s.g.failLog.Failed(derr)
		}
		return &verdict{reason: policy.ReasonAuditBudgetExceeded}
	}
	s.g.failLog.Failed(err)
	return &verdict{reason: policy.ReasonAuditUnavailable}
}

// auditRefusal records a deny that has no SQL (a fast-path call, a Bind of
// an unknown statement).
func (s *session) auditRefusal(reason policy.Reason) {
	if err := s.audit(policy.Decision{Reason: reason, Policy: s.g.engine().Digest()}, "", ""); err != nil {
		s.g.failLog.Failed(err)
	}
}

func (s *session) audit(d policy.Decision, sql, fp string) error {
	return s.g.deps.Audit.Append(s.record(audit.VerdictOf(d), sql, fp))
}

// record is the audit record of one decision on the session's statement
// sql (fingerprint fp; both empty for a refusal with no SQL).
func (s *session) record(v audit.Verdict, sql, fp string) *audit.Record {
	r := audit.Decided(audit.KindSQL, s.identity.ID, s.remote, v)
	r.Database, r.SQL, r.Fingerprint = s.database, sql, fp
	return r
}

// sanitizeReason keeps a reason to [a-z0-9_]: it travels inside the marker
// identifier the server echoes back, and into the client's message. A deny
// without a reason (which the engine never gives) is no_matching_rule, as
// the proxy answers it.
func sanitizeReason(r policy.Reason) policy.Reason {
	if r == "" {
		return policy.ReasonNoMatchingRule
	}
	ok := true
	for i := 0; i < len(r); i++ {
		c := r[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			ok = false
			break
		}
	}
	if ok && len(r) <= 40 {
		return r
	}
	b := []byte(strings.ToLower(string(r)))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) > 40 {
		b = b[:40]
	}
	return policy.Reason(b)
}
