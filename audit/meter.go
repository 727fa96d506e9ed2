package audit

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrOverBudget means the record's identity (or, unauthenticated, its
// client address) has spent its audit budget: the caller must refuse what
// the record would have allowed, with reason "audit_budget_exceeded". It
// wraps ErrUnavailable, so a caller that knows only that still denies.
var ErrOverBudget = fmt.Errorf("%w: identity over its audit budget", ErrUnavailable)

// maxMeterKeys bounds the budget and fold tables. Past it, budgets that
// are full again are dropped (a new one starts full too, so nothing is
// lost), and refusals of unseen keys fold into one per kind and reason.
const maxMeterKeys = 4096

// Meter stands between the entry points (proxy, DNS, Postgres gate) and
// the Writer so that one identity's flood costs the log a bounded number of
// records and cannot refuse the others:
//
//   - every record is charged to the budget of its identity, or of its
//     client address when it has none (IdentityRate records per second,
//     IdentityBurst at once);
//   - an allow over budget is not written and Append returns
//     ErrOverBudget: the caller refuses instead;
//   - a refusal (decision deny) is written in full while its key has
//     budget and fewer than RefusalSamples refusals of the same kind,
//     identity (or client) and reason were written this second; the rest
//     of the second are folded into one aggregate record, written when the
//     second ends, whose count says how many. A refusal sends nothing
//     upstream, so writing it a second later keeps the rule that nothing
//     goes upstream before its record;
//   - completions ("…_done", even when they deny because the upstream
//     failed) and records without a decision are always written: their
//     request's allow is already in the log. They still spend budget.
//
// Meter is an Appender; the Postgres gate and the DNS server use it the
// same way as the proxy.
type Meter struct {
	next    Appender
	rate    float64
	burst   float64
	samples int
	now     func() time.Time

	mu      sync.Mutex
	budgets map[budgetKey]*bucket
	folds   map[foldKey]*fold // refusals of the current second
	sec     int64             // the current second (Unix)

	folded, overBudget atomic.Uint64

	quit chan struct{}
	done chan struct{}
}

// MeterStats are the meter's counters, for metrics.
type MeterStats struct {
	// Folded counts refusals counted into aggregate records instead of
	// written in full.
	Folded uint64
	// OverBudget counts allows refused because their identity had spent
	// its budget.
	OverBudget uint64
}

// Stats returns the counters.
func (m *Meter) Stats() MeterStats {
	return MeterStats{Folded: m.folded.Load(), OverBudget: m.overBudget.Load()}
}

// budgetKey is an identity, or a client address for records without one.
type budgetKey struct{ identity, client string }

type foldKey struct {
	kind   Kind
	reason string
	who    budgetKey
}

type fold struct {
	written int   // full records this second
	count   int64 // folded records this second
	first   time.Time
	last    time.Time
	client  string // of the first folded refusal
}

// bucket is a token bucket that completions may overdraw (down to
// -burst): they must be written, and the debt delays the identity's next
// allows.
type bucket struct {
	tokens float64
	at     time.Time
}

// NewMeter returns a Meter in front of next, with cfg's budget, and starts
// the goroutine that writes each second's aggregate records. Close stops it.
func NewMeter(next Appender, cfg Config) *Meter {
	cfg.Provision()
	m := newMeter(next, cfg, time.Now)
	go m.run()
	return m
}

func newMeter(next Appender, cfg Config, now func() time.Time) *Meter {
	return &Meter{
		next:    next,
		rate:    cfg.IdentityRate,
		burst:   float64(cfg.IdentityBurst),
		samples: cfg.RefusalSamples,
		now:     now,
		budgets: make(map[budgetKey]*bucket),
		folds:   make(map[foldKey]*fold),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
	}
}

// Append writes, refuses or folds r as the type comment says. A folded
// refusal returns nil.
func (m *Meter) Append(r *Record) error {
	now := m.now()
	who := budgetKey{identity: r.Identity}
	if who.identity == "" {
		who.client = r.Client
	}
	m.mu.Lock()
	stale := m.roll(now)
	b := m.budget(who, now)
	var err error
	write := true
	switch {
	case r.Kind.IsCompletion():
		// Written whatever its decision: the request's allow is
		// already in the log, and its bytes and outcome belong to it.
	case r.Decision == DecisionAllow:
		if b.tokens < 1 {
			err, write = ErrOverBudget, false
		}
	case r.Decision == DecisionDeny:
		write = m.sample(r, who, b, now)
	}
	if write {
		b.tokens = max(b.tokens-1, -m.burst)
	}
	m.mu.Unlock()
	m.writeFolds(stale)
	if err != nil {
		m.overBudget.Add(1)
		return err
	}
	if !write {
		m.folded.Add(1)
		return nil
	}
	return m.next.Append(r)
}

// budget returns who's bucket, refilled to now.
func (m *Meter) budget(who budgetKey, now time.Time) *bucket {
	b, ok := m.budgets[who]
	if !ok {
		if len(m.budgets) >= maxMeterKeys {
			for k, o := range m.budgets {
				if o.tokens+now.Sub(o.at).Seconds()*m.rate >= m.burst {
					delete(m.budgets, k)
				}
			}
		}
		b = &bucket{tokens: m.burst, at: now}
		m.budgets[who] = b
		return b
	}
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(m.burst, b.tokens+d.Seconds()*m.rate)
		b.at = now
	}
	return b
}

// sample decides whether a refusal is written in full; if not it is
// counted in its fold.
func (m *Meter) sample(r *Record, who budgetKey, b *bucket, now time.Time) bool {
	k := foldKey{kind: r.Kind, reason: r.Reason, who: who}
	f, ok := m.folds[k]
	if !ok {
		if len(m.folds) >= maxMeterKeys {
			k.who = budgetKey{}
			if f, ok = m.folds[k]; !ok {
				f = &fold{written: m.samples}
				m.folds[k] = f
			}
		} else {
			f = &fold{}
			m.folds[k] = f
		}
	}
	if f.written < m.samples && b.tokens >= 1 {
		f.written++
		return true
	}
	if f.count == 0 {
		f.first, f.client = now, r.Client
	}
	f.count++
	f.last = now
	return false
}

// roll starts a new second when now is past the current one, returning
// the previous second's folds for the caller to write outside the lock.
func (m *Meter) roll(now time.Time) map[foldKey]*fold {
	sec := now.Unix()
	if sec == m.sec {
		return nil
	}
	m.sec = sec
	if len(m.folds) == 0 {
		return nil
	}
	old := m.folds
	m.folds = make(map[foldKey]*fold, len(old))
	return old
}

// writeFolds appends one aggregate record per fold that counted anything.
// If the log refuses one, its count is carried into the current second,
// so no refusal goes uncounted across an outage.
func (m *Meter) writeFolds(folds map[foldKey]*fold) {
	for k, f := range folds {
		if f.count == 0 {
			continue
		}
		r := &Record{
			TS: m.now(), Kind: k.kind, Identity: k.who.identity, Client: f.client,
			Decision: DecisionDeny, Reason: k.reason, Count: f.count,
			Detail: map[string]string{
				"first": f.first.UTC().Format(tsLayout),
				"last":  f.last.UTC().Format(tsLayout),
			},
		}
		if err := m.next.Append(r); err != nil {
			m.carry(k, f)
		}
	}
}

func (m *Meter) carry(k foldKey, f *fold) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.folds[k]
	if !ok {
		cur = &fold{written: m.samples, first: f.first, client: f.client}
		m.folds[k] = cur
	}
	if cur.count == 0 || f.first.Before(cur.first) {
		cur.first, cur.client = f.first, f.client
	}
	cur.count += f.count
	if f.last.After(cur.last) {
		cur.last = f.last
	}
}

// Flush writes the aggregate records of seconds that have ended by now.
func (m *Meter) Flush() {
	m.mu.Lock()
	stale := m.roll(m.now())
	m.mu.Unlock()
	m.writeFolds(stale)
}

// run writes each second's aggregates shortly after it ends, also when no
// further record arrives to roll the second over.
func (m *Meter) run() {
	defer close(m.done)
	t := time.NewTicker(time.Second / 4)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			m.Flush()
		case <-m.quit:
			return
		}
	}
}

// Close stops the flushing goroutine and writes the folds of the current
// second, so a clean stop loses no count. Close the Meter before the
// Writer.
func (m *Meter) Close() {
	close(m.quit)
	<-m.done
	m.mu.Lock()
	cur := m.folds
	m.folds = make(map[foldKey]*fold)
	m.mu.Unlock()
	m.writeFolds(cur)
}
