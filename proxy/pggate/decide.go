package pggate

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
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
}

// decide returns the verdict on text for this session, audited. The
// decision is cached by the exact text (then by its shape or normalized
// form) per identity, database and bundle digest; audit records are
// written every time. A verdict's audit SQL and effects are always this
// exact text's own (see forText).
func (s *session) decide(text string) *verdict {
	g := s.g
	if v := s.freshCatalog(); v != nil {
		return v
	}
	cat := s.catalog.load()
	key := cacheKey{prefix: s.keyPrefix, digest: g.engine().Digest(), catalog: cat.Digest(), text: text}
	v, ok := g.cache.get(key)
	if !ok {
		ctx := context.Background()
		if !sqlparse.InProcess(text) {
			// A worker parse can take a while: stop it if the client
			// leaves meanwhile.
			var stop func()
			ctx, stop = s.clientGone()
			defer stop()
		}
		// Worker parses are shared per identity in turn (issue 21 item 6).
		ctx = sqlparse.WithIdentity(ctx, s.identity.ID)
		v = g.verdictFor(ctx, s.identity, s.database, s.keyPrefix, cat, text)
		if v.cacheable {
			g.cache.add(key, v)
		}
	}
	for i := range v.stmts {
		a := &v.stmts[i]
		if err := g.deps.Audit.Append(s.record(audit.Verdict{
			Allow: a.allow, Reason: a.reason, Rule: a.rule, Policy: a.policyID,
		}, a.sql, a.fingerprint)); err != nil {
			return s.auditFailed(err, a)
		}
	}
	return v
}

// evaluate parses and decides text with db's catalog cat. Parsing is
// through package sqlparse, which keeps a crash of libpg_query out of this
// process; ctx ends a parse in a worker.
func (g *Gate) evaluate(ctx context.Context, ident policy.Identity, db, prefix string, cat *sqlfacts.Catalog, text string) *verdict {
	digest := g.engine().Digest()
	// The Go-computed shape saves every cgo call for texts of a known
	// shape (see shapeOf for why that is sound): a text of a cached shape
	// has the brackets, operators and words, and so the pre-scan's
	// outcome, of the text that was scanned and parsed to fill it; only
	// its length differs.
	skey, byShape, hit := g.shapeHit(prefix, digest, cat, text)
	if hit != nil {
		return hit
	}
	toks, err := sqlfacts.PrescanTokens(text, g.limits)
	if err != nil {
		return g.refused(ctx, err, text)
	}
	if byShape != nil {
		if tv := forText(byShape, text, toks); tv != nil {
			return tv
		}
	}
	// The normalized form keys verdicts only for texts parsed in-process:
	// Normalize costs a parse of its own, and a deep or long text is not
	// worth the second one.
	var norm string
	var nkey cacheKey
	if sqlparse.InProcess(text) {
		var err error
		if norm, err = sqlparse.Normalize(ctx, text); err != nil {
			return g.refused(ctx, &policy.DenyError{Reason: policy.ReasonSQLParseError, Err: err}, text)
		}
		// Facts carry no literal values, so every text with this
		// normalized form gets the same verdict
		// (TestNormalizedTextDeterminesFacts in sqlfacts), except texts
		// whose facts were read from constants, which are never stored
		// here (see below).
		nkey = cacheKey{prefix: prefix, digest: digest, catalog: cat.Digest(), text: norm, normalized: true}
		if v, ok := g.ncache.get(nkey); ok {
			if tv := forText(v, text, toks); tv != nil {
				g.addShape(skey, norm, v)
				return tv
			}
		}
	}
	opt := g.parseOptions(db, cat)
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
		d := g.engine().Decide(ctx, policy.Input{Identity: ident, Facts: st})
		if r := d.Reason; r == policy.ReasonPolicyTimeout || r == policy.ReasonPolicyError || r == policy.ReasonClientClosed {
			v.cacheable = false
		}
		// The audit text is the statement redacted from its tokens and
		// checked against its tree (Normalize keeps the literals of
		// utility statements); the fingerprint is of that text, since a
		// fingerprint of the literals would let a reader test guesses.
		a := stmtAudit{allow: d.Allow, reason: d.Reason, rule: d.Rule, policyID: d.Policy, sql: auditSQL(st.AuditSQL)}
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
	if v.cacheable && shared && nkey.normalized {
		g.ncache.add(nkey, v)
		g.addShape(skey, norm, v)
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

// shapeHit looks text up by its shape (shapeOf): its key (zero when the
// text is outside the shape's subset), the verdict cached under it, and
// that verdict made this text's own without a scan (forShape), if it can
// be.
func (g *Gate) shapeHit(prefix, digest string, cat *sqlfacts.Catalog, text string) (skey cacheKey, cached, hit *verdict) {
	var buf [256]byte
	shape, ok := shapeOf(text, buf[:0])
	if !ok {
		return cacheKey{}, nil, nil
	}
	skey = cacheKey{prefix: prefix, digest: digest, catalog: cat.Digest(), text: string(shape), shape: true}
	cached, ok = g.ncache.get(skey)
	if !ok {
		return skey, nil, nil
	}
	if len(text) <= g.cfg.MaxQueryBytes {
		hit = forShape(cached, skey.text)
	}
	return skey, cached, hit
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

// addShape caches v under the text's shape, but only when the shape is
// what Normalize made of the text (see shapeMatches).
func (g *Gate) addShape(skey cacheKey, norm string, v *verdict) {
	if skey.shape && shapeMatches(skey.text, norm) {
		g.ncache.add(skey, v)
	}
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

// cacheKeyPrefix identifies who decides: identity id, attributes in key
// order, and database.
func cacheKeyPrefix(id policy.Identity, db string) string {
	var b strings.Builder
	b.WriteString(id.ID)
	b.WriteByte(0)
	keys := make([]string, 0, len(id.Attributes))
	for k := range id.Attributes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(id.Attributes[k])
		b.WriteByte(0)
	}
	b.WriteString(db)
	b.WriteByte(0)
	return b.String()
}

// cacheKey names a verdict without building a string: who decides (the
// session's identity/database prefix), which bundle, which catalog of the
// database (a new user function changes what a call resolves to), and the
// exact query text, its normalized form, or its shape (shapeOf).
type cacheKey struct {
	prefix, digest, catalog, text string
	normalized, shape             bool
}

// verdictCache is a map bounded in entries and in bytes; when either bound
// would be passed it starts over, which keeps every operation O(1) without
// per-entry bookkeeping. An entry bound alone let one identity pin 287 MB
// with 1,000 distinct 60 KB queries (2.8 GB at the default size).
type verdictCache struct {
	mu       sync.RWMutex
	max      int
	maxBytes int
	bytes    int
	m        map[cacheKey]*verdict
}

// Byte bounds of a verdict cache: the most one cache holds, and the
// longest text it keeps (a longer one is decided each time: its parse
// costs more than the lookup saves, and memory is the scarcer resource).
const (
	cacheMaxBytes     = 32 << 20
	cacheMaxTextBytes = 16 << 10
)

func newVerdictCache(max int) *verdictCache {
	if max <= 0 {
		return nil
	}
	return &verdictCache{max: max, maxBytes: cacheMaxBytes, m: make(map[cacheKey]*verdict, min(max, 1024))}
}

func (c *verdictCache) get(key cacheKey) (*verdict, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.RLock()
	v, ok := c.m[key]
	c.mu.RUnlock()
	return v, ok
}

func (c *verdictCache) add(key cacheKey, v *verdict) {
	if c == nil || len(key.text) > cacheMaxTextBytes {
		return
	}
	size := entryBytes(key, v)
	c.mu.Lock()
	if len(c.m) >= c.max || c.bytes+size > c.maxBytes {
		clear(c.m)
		c.bytes = 0
	}
	if _, ok := c.m[key]; !ok {
		c.bytes += size
	}
	c.m[key] = v
	c.mu.Unlock()
}

// entryOverhead is what an entry holds besides its strings: the map slot,
// the verdict and its slices' headers, rounded up.
const entryOverhead = 256

// entryBytes is what an entry keeps alive: its key's strings, the
// verdict's audit SQL and rules, and the texts of the objects it creates.
// Strings shared with other entries (the prefix, the digests) are counted
// in each: an over-count only starts the cache over sooner.
func entryBytes(key cacheKey, v *verdict) int {
	n := entryOverhead + len(key.prefix) + len(key.digest) + len(key.catalog) + len(key.text)
	for _, a := range v.stmts {
		n += entryOverhead + len(a.sql) + len(a.fingerprint) + len(a.rule) + len(a.policyID)
	}
	for _, e := range v.effects {
		n += entryOverhead + len(e.name) + len(e.text)
	}
	return n
}
