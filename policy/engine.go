package policy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/rego"
	"go.uber.org/zap"

	defaultbundle "github.com/egressd/egressd/rego"
)

// Engine decides requests with one bundle, loaded by New. It is safe for
// concurrent use. A reload builds a new Engine and hands it to the
// listeners (`serve`), so a bundle is checked against the identities
// before it decides anything.
type Engine struct {
	cfg    Config
	log    *zap.Logger
	source func() (fs.FS, string)
	// srcs are the bundle files cur was compiled from, which WithGrants
	// compiles again: a grant applies to the bundle in force, never to
	// one edited on disk since.
	srcs []source
	cur  *compiled
	// revision is the bundle service's revision of the bundle, which
	// Digest appends; "" for a local bundle.
	revision string
}

// New loads cfg.Dir, or the bundle embedded by package rego when cfg.Dir is
// empty, compiles it and runs its Rego tests. A bundle that fails either is
// an error.
//
// With cfg.BundleURL set it loads cfg.Fetched, the bundle serve fetched
// from there, and its revision joins the digest (Digest); without one
// fetched it refuses, as there is nothing to decide with.
func New(ctx context.Context, cfg Config, log *zap.Logger) (*Engine, error) {
	rev := ""
	if cfg.Fetched != nil {
		rev = cfg.Fetched.Revision
	}
	return newEngine(ctx, cfg, rev, log)
}

// newEngine is New with the revision the digest carries given: a fetched
// bundle's, or an archived one's (NewArchived).
func newEngine(ctx context.Context, cfg Config, revision string, log *zap.Logger) (*Engine, error) {
	cfg.Provision()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("policy.%w", err)
	}
	if cfg.BundleURL != "" && cfg.Fetched == nil {
		return nil, fmt.Errorf("policy.bundle_url %q: no bundle fetched from it: serve fetches it at start; "+
			"give check and policy commands the bundle with --policy DIR (or ask a running egressd: check --server)", cfg.BundleURL)
	}
	e := &Engine{cfg: cfg, log: log.Named("policy"), source: bundleSource(cfg), revision: revision}
	c, err := e.build(ctx)
	if err != nil {
		return nil, err
	}
	e.cur = c
	e.log.Info("policy loaded", zap.String("policy", c.digest), zap.String("dir", cfg.Dir), zap.String("bundle_url", cfg.BundleURL))
	return e, nil
}

// bundleSource returns the bundle filesystem and its name for messages.
func bundleSource(cfg Config) func() (fs.FS, string) {
	switch {
	case cfg.Fetched != nil:
		f := cfg.Fetched
		return func() (fs.FS, string) { return f.files, "bundle " + withRevision(f.Source, f.Revision) }
	case cfg.Dir == "":
		return func() (fs.FS, string) { return defaultbundle.FS, "embedded bundle" }
	}
	return func() (fs.FS, string) { return os.DirFS(cfg.Dir), cfg.Dir }
}

func (e *Engine) build(ctx context.Context) (*compiled, error) {
	if e.cfg.Dir != "" {
		if err := checkDir(e.cfg.Dir); err != nil {
			return nil, err
		}
	}
	fsys, name := e.source()
	srcs, err := readBundle(fsys)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", name, err)
	}
	// A ledger vouches for the bundle alone: with grants in data, the
	// tests run over them (a grant is data the bundle's tests must pass).
	tests, ledger := testsRun, e.cfg.Tests
	if len(e.cfg.Grants) > 0 {
		ledger = nil
	}
	content := digestOf(srcs)
	if ledger != nil && ledger.Passed(content) {
		tests = testsPassed
	}
	c, err := compileBundle(ctx, srcs, e.cfg.Grants, e.cfg.CacheSize, tests)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", name, err)
	}
	c.digest = withRevision(c.digest, e.revision)
	if ledger != nil && tests == testsRun {
		ledger.Record(content)
	}
	e.srcs = srcs
	return c, nil
}

// WithGrants is the engine's bundle with grants in place of its own:
// compiled and tested as New does, so that a grant the bundle's checks or
// Rego tests refuse is an error and e stays as it is.
func (e *Engine) WithGrants(ctx context.Context, grants []Grant) (*Engine, error) {
	ne := &Engine{cfg: e.cfg, log: e.log, source: e.source, srcs: e.srcs, revision: e.revision}
	ne.cfg.Grants = grants
	c, err := compileBundle(ctx, e.srcs, grants, e.cfg.CacheSize, testsRun)
	if err != nil {
		return nil, fmt.Errorf("the policy bundle with %d grant(s): %w", len(grants), err)
	}
	c.digest = withRevision(c.digest, e.revision)
	ne.cur = c
	return ne, nil
}

// Grants are the grants the engine decides with.
func (e *Engine) Grants() []Grant { return e.cfg.Grants }

// GrantOf is the grant whose rule id is rule, if the engine holds it.
func (e *Engine) GrantOf(rule string) (Grant, bool) {
	if !strings.HasPrefix(rule, GrantRulePrefix) {
		return Grant{}, false
	}
	for _, g := range e.cfg.Grants {
		if g.RuleID() == rule {
			return g, true
		}
	}
	return Grant{}, false
}

// Digest identifies the bundle: "sha256:…" over its files, then "@" and
// the revision of a bundle from a bundle service ("sha256:…@REV"); see
// SplitDigest.
func (e *Engine) Digest() string { return e.cur.digest }

// keyPool holds decision-key buffers so a cached decision allocates
// nothing.
var keyPool = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// Decide answers one input with the active bundle. It never fails: what
// cannot be decided is a deny whose reason says why. Decision.Policy is the
// digest of the bundle that answered.
func (e *Engine) Decide(ctx context.Context, in Input) Decision {
	c := e.cur
	if in.Facts == nil {
		return c.deny(ReasonNoFacts)
	}
	kind := in.Facts.Kind()
	if kind == 0 || int(kind) >= len(c.queries) {
		return c.deny(ReasonNoDecision)
	}
	if f, ok := in.Facts.(*URLFacts); ok && f.Body != nil {
		// A body is not part of the cache key: decided every time.
		d, _ := c.eval(ctx, e, kind, in)
		return c.unexpired(d)
	}
	bp := keyPool.Get().(*[]byte)
	key := appendInputKey((*bp)[:0], kind, in)
	d, ok := c.cache.get(key)
	if !ok {
		var cacheable bool
		d, cacheable = c.eval(ctx, e, kind, in)
		if cacheable {
			c.cache.add(key, d)
		}
	}
	*bp = key[:0]
	keyPool.Put(bp)
	d = c.unexpired(d)
	if ce := e.log.Check(zap.DebugLevel, "decision"); ce != nil {
		ce.Write(zap.Stringer("kind", kind), zap.String("identity", in.Identity.ID),
			zap.Bool("allow", d.Allow), zap.Stringer("reason", d.Reason), zap.String("rule", d.Rule), zap.Bool("cached", ok))
	}
	return d
}

// unexpired is d, unless a grant allowed it and has expired: the timer
// that takes an expired grant out of the bundle (serve's grants manager)
// may run late or fail to apply, and a grant must stop allowing on time
// whatever happens to it.
func (c *compiled) unexpired(d Decision) Decision {
	if !d.Allow || c.grantExpiry == nil {
		return d
	}
	if exp, ok := c.grantExpiry[d.Rule]; ok && !time.Now().Before(exp) {
		return Decision{Reason: ReasonGrantExpired, Rule: d.Rule, Policy: c.digest}
	}
	return d
}

func (c *compiled) deny(reason Reason) Decision {
	return Decision{Reason: reason, Policy: c.digest}
}

// appendInputKey encodes the kind, the identity (its mode, and attributes
// in key order, so that map order never splits the cache) and the facts.
func appendInputKey(dst []byte, kind Kind, in Input) []byte {
	dst = append(dst, byte(kind), byte(in.Identity.Mode))
	dst = appendStr(dst, in.Identity.ID)
	attrs := in.Identity.Attributes
	dst = binary.AppendUvarint(dst, uint64(len(attrs)))
	if len(attrs) > 0 {
		var stack [16]string
		keys := stack[:0]
		for k := range attrs {
			keys = append(keys, k)
		}
		insertionSort(keys)
		for _, k := range keys {
			dst = appendStr(dst, k)
			dst = appendStr(dst, attrs[k])
		}
	}
	return in.Facts.AppendKey(dst)
}

func insertionSort(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// eval runs the kind's prepared query. cacheable is false for outcomes
// that may differ on a retry (timeouts, evaluation errors).
func (c *compiled) eval(ctx context.Context, e *Engine, kind Kind, in Input) (d Decision, cacheable bool) {
	pq := c.queries[kind]
	if pq == nil {
		return c.deny(ReasonNoDecision), true
	}
	input := c.input(kind, in)
	ec, stopCtx := newEvalCancel(ctx, e.cfg.EvalTimeout)
	vc := getVcache()
	rs, err := pq.Eval(ctx, rego.EvalParsedInput(input), evalNoMetrics, evalRawResult, rego.EvalExternalCancel(ec), rego.EvalVirtualCache(vc))
	vc.put()
	timedOut := ec.release(stopCtx)
	if err != nil {
		reason := ReasonPolicyError
		switch {
		case timedOut || errors.Is(ctx.Err(), context.DeadlineExceeded):
			reason = ReasonPolicyTimeout
		case ctx.Err() != nil:
			// The caller gave up (its client left): nothing failed in
			// the policy, and the record says who ended it.
			return c.deny(ReasonClientClosed), false
		}
		e.log.Warn("policy evaluation failed", zap.Stringer("kind", kind), zap.Stringer("reason", reason), zap.Error(err))
		return c.deny(reason), false
	}
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return c.deny(ReasonNoDecision), true
	}
	d, ok := decodeDecision(rs[0].Expressions[0].Value)
	if !ok {
		e.log.Warn("malformed policy decision", zap.Stringer("kind", kind), zap.Any("value", rs[0].Expressions[0].Value))
		return c.deny(ReasonMalformedDecision), true
	}
	d.Policy = c.digest
	if kind == KindHTTP && d.Allow {
		// Looked up Go-side, not returned by Rego: the actions are static
		// rule data that the load-time checks (secret names, cleartext)
		// have vetted, which a value computed by a module would escape.
		d.Credentials = c.credentials[d.Rule]
	}
	if kind == KindHTTP && d.Rule != "" {
		d.Options = c.views.byRule[d.Rule]
	}
	// Observed here, before the cache, so that a cached observed decision
	// costs nothing more: the identity's mode is in the cache key.
	return c.observe(d, kind, in.Identity), true
}

// Options shared by every evaluation: no metrics, and the result left as
// an AST term (decodeDecision reads it) rather than converted to Go maps.
var (
	evalNoMetrics = rego.EvalMetrics(metrics.NoOp())
	evalRawResult = rego.EvalGenerateJSON(func(t *ast.Term, _ *rego.EvalContext) (any, error) { return t, nil })
)

// decodeDecision reads {"allow": bool, "reason": string, "rule": string,
// "tls"?: bool, "inspect"?: bool, "read_only"?: bool}. A deny without a reason is malformed:
// every deny says why.
func decodeDecision(v any) (Decision, bool) {
	t, ok := v.(*ast.Term)
	if !ok {
		return Decision{}, false
	}
	obj, ok := t.Value.(ast.Object)
	if !ok {
		return Decision{}, false
	}
	allow, ok1 := termBool(obj.Get(termAllow))
	reason, ok2 := termString(obj.Get(termReason))
	rule, ok3 := termString(obj.Get(termRule))
	if !ok1 || !ok2 || !ok3 || (!allow && reason == "") {
		return Decision{}, false
	}
	d := Decision{Allow: allow, Reason: Reason(reason), Rule: rule}
	if tt := obj.Get(termTLS); tt != nil {
		if d.TLS, ok = termBool(tt); !ok {
			return Decision{}, false
		}
	}
	if ti := obj.Get(termInspect); ti != nil {
		if d.Inspect, ok = termBool(ti); !ok {
			return Decision{}, false
		}
	}
	if tr := obj.Get(termReadOnly); tr != nil {
		if d.ReadOnly, ok = termBool(tr); !ok {
			return Decision{}, false
		}
	}
	return d, true
}

var (
	termAllow    = ast.StringTerm("allow")
	termReason   = ast.StringTerm("reason")
	termRule     = ast.StringTerm("rule")
	termTLS      = ast.StringTerm("tls")
	termInspect  = ast.StringTerm("inspect")
	termReadOnly = ast.StringTerm("read_only")
)

func termBool(t *ast.Term) (bool, bool) {
	if t == nil {
		return false, false
	}
	b, ok := t.Value.(ast.Boolean)
	return bool(b), ok
}

func termString(t *ast.Term) (string, bool) {
	if t == nil {
		return "", false
	}
	s, ok := t.Value.(ast.String)
	return string(s), ok
}

// kindTerms are the input.kind values, built once.
var kindTerms = func() [KindRedirect + 1]*ast.Term {
	var ts [KindRedirect + 1]*ast.Term
	for k := range ts {
		ts[k] = ast.StringTerm(Kind(k).String())
	}
	return ts
}()

// buildInput makes the Rego input as AST values directly, skipping a JSON
// round trip.
func buildInput(kind Kind, in Input, identity *ast.Term) ast.Object {
	// Sized for the largest facts (http: 8 fields) plus kind and identity,
	// so the object never grows.
	obj := ast.NewObjectWithCapacity(12)
	obj.Insert(termKind, kindTerms[kind])
	obj.Insert(termIdentity, identity)
	in.Facts.AddTo(obj)
	return obj
}

// identityTerm is input.identity: {"id": …, "attributes": {…}}.
func identityTerm(id Identity) *ast.Term {
	obj := ast.NewObjectWithCapacity(2)
	obj.Insert(termID, ast.StringTerm(id.ID))
	attrs := ast.InternedEmptyObject
	if len(id.Attributes) > 0 {
		a := ast.NewObjectWithCapacity(len(id.Attributes))
		for k, v := range id.Attributes {
			a.Insert(ast.StringTerm(k), ast.StringTerm(v))
		}
		attrs = ast.NewTerm(a)
	}
	obj.Insert(termAttributes, attrs)
	return ast.NewTerm(obj)
}

// identityTerms keeps input.identity of identities without attributes
// (nearly all: they come from the configuration), built once per id. It
// stops growing at maxIdentityTerms; past that, terms are built per
// evaluation.
type identityTerms struct {
	m sync.Map // id → *ast.Term
	n atomic.Int32
}

const maxIdentityTerms = 4096

func (c *identityTerms) get(id Identity) *ast.Term {
	if len(id.Attributes) > 0 {
		return identityTerm(id)
	}
	if t, ok := c.m.Load(id.ID); ok {
		return t.(*ast.Term)
	}
	t := identityTerm(id)
	if c.n.Load() < maxIdentityTerms && c.n.Add(1) <= maxIdentityTerms {
		c.m.Store(id.ID, t)
	}
	return t
}
