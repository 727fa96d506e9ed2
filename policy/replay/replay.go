package replay

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/policy"
)

// Outcome is what a replay makes of one record.
type Outcome string

// The outcomes.
const (
	// Same: the candidate bundle decides the record's request as recorded
	// (allow or deny; the rule and reason may differ).
	Same Outcome = "same"
	// NewlyDenied: recorded allowed, denied by the candidate.
	NewlyDenied Outcome = "newly_denied"
	// NewlyAllowed: recorded denied, allowed by the candidate.
	NewlyAllowed Outcome = "newly_allowed"
	// NotRedecidable: the record lacks a fact to decide it exactly.
	NotRedecidable Outcome = "not_redecidable"
	// Skipped: not a decision of a bundle (a completion, a writer record,
	// a refusal before the policy).
	Skipped Outcome = "skipped"
)

// Verdict is one side of a comparison.
type Verdict struct {
	Allow  bool          `json:"allow"`
	Reason policy.Reason `json:"reason,omitempty"`
	Rule   string        `json:"rule,omitempty"`
	// WouldDeny is set on an allow an observe mode let through: the
	// reason enforcing would deny with. Such an allow is an allow: the
	// request went through, and a candidate that enforces denies it anew.
	WouldDeny policy.Reason `json:"would_deny,omitempty"`
}

// verdictOf is d as a Verdict.
func verdictOf(d policy.Decision) Verdict {
	v := Verdict{Allow: d.Allow, Reason: d.Reason, Rule: d.Rule}
	if d.Allow && d.WouldDeny != nil {
		v.WouldDeny = d.WouldDeny.Reason
	}
	return v
}

// Entry is one replayed record.
type Entry struct {
	Seq      uint64    `json:"seq"`
	TS       time.Time `json:"ts"`
	Kind     string    `json:"kind"`
	Identity string    `json:"identity"`
	// Target is what the record asked for: "GET http://host/path",
	// "host:443", "name A", "db: SQL".
	Target  string  `json:"target"`
	Outcome Outcome `json:"outcome"`
	// Recorded is the verdict in the log; New the candidate's (set when
	// re-decided).
	Recorded Verdict  `json:"recorded"`
	New      *Verdict `json:"new,omitempty"`
	// Missing is set on NotRedecidable.
	Missing *Missing `json:"missing,omitempty"`
	// Skip says why a Skipped record is no decision of a bundle: its kind
	// ("completion", "started", …) or "before_policy".
	Skip string `json:"skip,omitempty"`
	// Verified says the record was first re-decided under its own
	// (archived) bundle and came out as recorded.
	Verified bool `json:"verified"`
}

// Options configure a Replayer.
type Options struct {
	Env
	// New is the candidate bundle.
	New Engine
	// Own loads the bundle of a digest (a record's "policy"), for the
	// oracle: a record is first re-decided under its own bundle, and one
	// that comes out otherwise than recorded is not re-decidable, never a
	// change. An error (ErrNotArchived among them) leaves the record
	// unverified. If nil, no record is verified.
	Own func(ctx context.Context, digest string) (Engine, error)
	// Examples is how many records each group keeps. If zero, 3.
	Examples int
}

// Replayer re-decides records one at a time (Add) and sums them up
// (Report).
type Replayer struct {
	o       Options
	own     map[string]ownBundle
	entries []Entry // changed entries, in log order
	groups  map[groupKey]*Group
	rep     Report
}

type ownBundle struct {
	eng Engine
	err error
}

// NewReplayer returns a Replayer for o.
func NewReplayer(o Options) *Replayer {
	if o.Examples == 0 {
		o.Examples = 3
	}
	return &Replayer{o: o, own: map[string]ownBundle{}, groups: map[groupKey]*Group{},
		rep: Report{NotRedecidable: map[Fact]int{}, Skipped: map[string]int{}}}
}

// Add replays one record and returns its entry.
func (r *Replayer) Add(ctx context.Context, rec *audit.Record) Entry {
	e := r.replay(ctx, rec)
	r.count(e)
	return e
}

func (r *Replayer) replay(ctx context.Context, rec *audit.Record) Entry {
	e := Entry{Seq: rec.Seq, TS: rec.TS, Kind: rec.Kind.String(), Identity: rec.Identity, Target: targetOf(rec),
		Recorded: Verdict{Allow: rec.Decision == audit.DecisionAllow, Reason: policy.Reason(rec.Reason), Rule: rec.Rule,
			WouldDeny: policy.Reason(rec.WouldDeny)}}
	c, err := InputOf(rec)
	if errors.Is(err, ErrNotDecision) {
		e.Outcome, e.Skip = Skipped, kindClass(rec.Kind)
		return e
	}
	if err != nil {
		return notRedecidable(e, err)
	}
	st := stageOf(c.Kind, e.Recorded.Reason)
	if st == stageAfter && e.Recorded.Allow {
		// An allow with a reason of the later checks (an allowed name
		// without addresses): the checks let it through, as they let
		// through every allow replay compares.
		st = stageDecided
	}
	switch {
	case st == stageBefore:
		e.Outcome, e.Skip = Skipped, skipBeforePolicy
		return e
	case st == stageParse:
		return notRedecidable(e, &Missing{Fact: FactTarget, Detail: "refused while parsed (" + rec.Reason + ")"})
	case e.Recorded.Reason == policy.ReasonHostMismatch:
		return notRedecidable(e, &Missing{Fact: FactHostHeader, Detail: "refused for its Host header"})
	case bodyReasons[e.Recorded.Reason]:
		return notRedecidable(e, &Missing{Fact: FactBody, Detail: "refused for its body (" + rec.Reason + ")"})
	case c.Kind == policy.KindSQL && e.Recorded.Reason == policy.ReasonOtherStatementDenied:
		return notRedecidable(e, &Missing{Fact: FactOtherStatements, Detail: "refused for another statement of its query"})
	}
	var own *Result
	if eng := r.ownEngine(ctx, rec.Policy); eng != nil {
		old, err := r.o.Decide(ctx, eng, c)
		if err != nil {
			return notRedecidable(e, err)
		}
		if m := r.mayReadBody(c, old); m != nil {
			return notRedecidable(e, m)
		}
		// A refused redirect is recorded redirect_denied whatever the
		// policy's reason (proxy: the Location's refusal).
		anyReason := c.Kind == policy.KindRedirect
		if d := disagree(e.Recorded, st, old.Decision, anyReason); d != "" {
			return notRedecidable(e, &Missing{Fact: FactOwnBundle, Detail: d})
		}
		e.Verified, own = true, &old
	}
	res, err := r.o.Decide(ctx, r.o.New, c)
	if err != nil {
		return notRedecidable(e, err)
	}
	if m := r.mayReadBody(c, res); m != nil {
		return notRedecidable(e, m)
	}
	nv := verdictOf(res.Decision)
	e.New = &nv
	if st == stageAfter && nv.Allow {
		f := FactRequest
		if c.Kind == policy.KindDNS {
			f = FactDNSAnswer
		}
		return notRedecidable(e, &Missing{Fact: f, Detail: "refused after the policy (" + rec.Reason + "); the candidate allows it (rule " + nv.Rule + ")"})
	}
	if st == stageAfter {
		// Denied either way: the candidate's refusal comes first.
		e.Outcome = Same
		return e
	}
	if nv.Allow && e.Recorded.Allow && requestChecks(res.Decision) && (own == nil || !sameChecks(own.Decision, res.Decision)) {
		return notRedecidable(e, &Missing{Fact: FactRequest, Detail: "the candidate's rule " + nv.Rule + " binds credentials or bounds the request otherwise, and the checks after the policy read headers, query values and sizes the record does not hold"})
	}
	switch {
	case nv.Allow == e.Recorded.Allow:
		e.Outcome = Same
	case nv.Allow:
		e.Outcome = NewlyAllowed
	default:
		e.Outcome = NewlyDenied
	}
	return e
}

// requestChecks reports whether an allow leads to checks after the
// policy that read what a record does not hold: credentials to add, or a
// rule's bounds and body conditions.
func requestChecks(d policy.Decision) bool { return len(d.Credentials) > 0 || d.Options != nil }

// sameChecks reports whether two allows lead to the same checks after the
// policy, so a request that passed them under a passes them under b.
func sameChecks(a, b policy.Decision) bool {
	return reflect.DeepEqual(a.Credentials, b.Credentials) && reflect.DeepEqual(a.Options, b.Options)
}

// mayReadBody is a *Missing when a rule of eng may decide on the body of
// c's request: whether it had one, and what it said, are not recorded.
func (r *Replayer) mayReadBody(c Case, res Result) *Missing {
	f, ok := res.Facts.(*policy.URLFacts)
	if !ok || f.Kind() != policy.KindHTTP || bodiless(c.Request.Method) {
		return nil
	}
	probe := *f
	probe.HasBody = true
	for _, eng := range []Engine{r.o.New, r.ownOf(res)} {
		if eng != nil && eng.NeedBody(&probe).Max > 0 {
			return &Missing{Fact: FactBody, Detail: "a rule of bundle " + eng.Digest() + " decides on the body of this request"}
		}
	}
	return nil
}

// bodiless: a request of this method that carried a body is refused
// (request_body_not_allowed), so an allowed one had none.
func bodiless(method string) bool {
	switch method {
	case "GET", "HEAD", "OPTIONS", "TRACE":
		return true
	}
	return false
}

// ownOf is the loaded own bundle that decided res, if any.
func (r *Replayer) ownOf(res Result) Engine {
	if ob, ok := r.own[res.Decision.Policy]; ok {
		return ob.eng
	}
	return nil
}

// ownEngine loads (once) the bundle of digest, nil if it cannot be had.
func (r *Replayer) ownEngine(ctx context.Context, digest string) Engine {
	if r.o.Own == nil || digest == "" {
		return nil
	}
	ob, ok := r.own[digest]
	if !ok {
		ob.eng, ob.err = r.o.Own(ctx, digest)
		r.own[digest] = ob
		if ob.err != nil {
			r.rep.Unloaded = append(r.rep.Unloaded, fmt.Sprintf("%s: %v", digest, ob.err))
		}
	}
	return ob.eng
}

// disagree says how a re-decision under the record's own bundle differs
// from the record, "" when it does not.
func disagree(rec Verdict, st stage, d policy.Decision, anyReason bool) string {
	if st == stageAfter {
		if d.Allow {
			return ""
		}
		return fmt.Sprintf("recorded as allowed by the policy and refused later (%s); denied %s by rule %q", rec.Reason, d.Reason, d.Rule)
	}
	switch {
	case rec.Allow != d.Allow:
		return fmt.Sprintf("recorded %s, re-decided %s (%s, rule %q)", verb(rec.Allow), verb(d.Allow), d.Reason, d.Rule)
	case rec.Rule != d.Rule:
		return fmt.Sprintf("recorded by rule %q, re-decided by rule %q", rec.Rule, d.Rule)
	case rec.WouldDeny != verdictOf(d).WouldDeny:
		return fmt.Sprintf("recorded would_deny %q, re-decided %q (the identity's mode differs?)", rec.WouldDeny, verdictOf(d).WouldDeny)
	case !rec.Allow && !anyReason && rec.Reason != d.Reason:
		return fmt.Sprintf("recorded reason %s, re-decided %s", rec.Reason, d.Reason)
	}
	return ""
}

func verb(allow bool) string {
	if allow {
		return "allow"
	}
	return "deny"
}

func notRedecidable(e Entry, err error) Entry {
	var m *Missing
	if !errors.As(err, &m) {
		m = &Missing{Fact: FactTarget, Detail: err.Error()}
	}
	e.Outcome, e.Missing = NotRedecidable, m
	return e
}

// skipBeforePolicy is the Skip of a refusal made before the policy was
// asked.
const skipBeforePolicy = "before_policy"

// kindClass is how a skipped record that is no decision is counted.
func kindClass(k audit.Kind) string {
	if k.IsCompletion() {
		return "completion"
	}
	return string(k)
}

// targetOf is a record's target as one line.
func targetOf(rec *audit.Record) string {
	switch rec.Kind {
	case audit.KindHTTP, audit.KindRedirect:
		t := rec.Method + " " + rec.Scheme + "://" + authority(rec.Host, rec.Port) + rec.Path
		if rec.Query != "" {
			t += "?" + rec.Query
		}
		return t
	case audit.KindConnect:
		return authority(rec.Host, rec.Port)
	case audit.KindDNS:
		return rec.Name + " " + rec.QType
	case audit.KindSQL:
		if rec.SQL == "" {
			return rec.Database + ": (login)"
		}
		return rec.Database + ": " + rec.SQL
	}
	return ""
}

// sortedKeys returns m's keys in order.
func sortedKeys[K ~string, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}
