// Package budget counts per-identity allowances over sliding windows: the
// token budgets of model rules (a request reserves its maximum up front
// and settles with its actual use) and byte budgets. Counts live in this
// process only, so a budget is per replica; they are rebuilt at start from
// the audit log, the record of truth, through Add.
package budget

import (
	"sync"
	"time"
)

// buckets is how many parts a window is counted in: use expires in steps
// of a sixtieth of the window, and each key costs a fixed 60 counters.
const buckets = 60

// sweepEvery is how often keys idle for a whole window are dropped.
const sweepEvery = time.Minute

// Key names one allowance: an identity's use under one scope.
type Key struct {
	// Identity is the sandbox identity the use is counted for.
	Identity string
	// Scope is what is counted: a rule id for a token budget, or "bytes".
	Scope string
}

// Ledger counts use per key over sliding windows. It is safe for
// concurrent use; every call costs O(buckets) under one mutex (and, once
// a minute, one pass over the keys to drop idle ones), and memory
// is a fixed number of counters per key in use, since keys idle for a
// whole window are dropped.
//
// Use at time t counts while the window's bucket of t is among the
// latest 60 buckets, i.e. for at least per*59/60 and at most per after t.
type Ledger struct {
	now func() time.Time

	mu        sync.Mutex
	windows   map[windowKey]*window
	lastSweep time.Time
}

// windowKey separates a key's windows of different lengths, as after a
// reload changing a budget's period.
type windowKey struct {
	Key
	per time.Duration
}

// window is one key's use: counts[i] is the use in bucket number nums[i]
// (time since the epoch divided by width); reserved is what reservations
// not yet settled hold.
type window struct {
	width    time.Duration
	counts   [buckets]int64
	nums     [buckets]int64
	reserved int64
	lastUse  int64 // the latest bucket number used or reserved in
}

// NewLedger returns an empty ledger reading the time from now (time.Now
// if nil).
func NewLedger(now func() time.Time) *Ledger {
	if now == nil {
		now = time.Now
	}
	return &Ledger{now: now, windows: map[windowKey]*window{}}
}

// Reservation is use held against a budget until the request it was made
// for settles it.
type Reservation struct {
	l    *Ledger
	wk   windowKey // not the window: one holding nothing may be swept
	n    int64
	done bool // guarded by l.mu
}

// Reserve holds n against k's budget of limit per window per, when the
// window's use plus what other reservations hold plus n is at most limit.
// Otherwise it returns false and how long until enough of the window's
// use has expired for n to fit, in whole seconds, at least 1s:
// reservations are counted as used now, and n alone over limit waits the
// whole window. A non-positive per refuses.
//
// Guarantee: admission is atomic, so each admitted request found room for
// its whole reservation beside every other one. The window's use exceeds
// limit only by what settled requests used beyond their reservation
// (Settle with actual > n) and by use recorded with Add; where every
// request uses at most what it reserved, concurrent requests never
// overshoot.
func (l *Ledger) Reserve(k Key, limit int64, per time.Duration, n int64) (*Reservation, time.Duration, bool) {
	n = max(n, 0)
	if per <= 0 {
		return nil, time.Second, false
	}
	if n > limit {
		return nil, ceilSecond(per), false
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	w := l.window(k, per)
	cur := w.bucket(now)
	used := w.used(cur)
	if over := used + w.reserved + n - limit; over > 0 {
		return nil, w.retryAfter(now, cur, over), false
	}
	w.reserved += n
	w.lastUse = max(w.lastUse, cur)
	return &Reservation{l: l, wk: windowKey{k, per}, n: n}, 0, true
}

// Settle replaces the reservation with actual, the request's use,
// counted now. Only the first call of Settle or Release counts.
func (r *Reservation) Settle(actual int64) {
	now := r.l.now()
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	if r.done {
		return
	}
	r.done = true
	w := r.l.window(r.wk.Key, r.wk.per)
	w.reserved -= r.n
	w.add(w.bucket(now), w.bucket(now), max(actual, 0))
}

// Release gives the reservation back unused, for a request refused after
// reserving: Settle(0).
func (r *Reservation) Release() { r.Settle(0) }

// Add records n used at a past time at, as when rebuilding the ledger
// from the audit log at start. Use older than the window is ignored; a
// time after now counts as now.
func (l *Ledger) Add(k Key, per time.Duration, at time.Time, n int64) {
	if per <= 0 || n <= 0 {
		return
	}
	now := l.now()
	if at.After(now) {
		at = now
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.window(k, per)
	w.add(w.bucket(now), w.bucket(at), n)
}

// Used is k's settled use in its window of per now, reservations not
// included.
func (l *Ledger) Used(k Key, per time.Duration) int64 {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	w, ok := l.windows[windowKey{k, per}]
	if !ok {
		return 0
	}
	return w.used(w.bucket(now))
}

// window returns k's window of per, creating it. Called with l.mu held.
func (l *Ledger) window(k Key, per time.Duration) *window {
	wk := windowKey{k, per}
	w, ok := l.windows[wk]
	if !ok {
		// Rounded up, so the window is never shorter than per.
		w = &window{width: (per + buckets - 1) / buckets}
		for i := range w.nums {
			w.nums[i] = -1 << 62
		}
		l.windows[wk] = w
	}
	return w
}

// sweep drops, once per sweepEvery, the windows with nothing reserved and
// no use in their last full window. Called with l.mu held.
func (l *Ledger) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < sweepEvery {
		return
	}
	l.lastSweep = now
	for wk, w := range l.windows {
		if w.reserved == 0 && w.lastUse <= w.bucket(now)-buckets {
			delete(l.windows, wk)
		}
	}
}

func (w *window) bucket(t time.Time) int64 {
	return t.UnixNano() / int64(w.width)
}

// slot is where bucket number num is counted.
func slot(num int64) int64 { return (num%buckets + buckets) % buckets }

// live says whether bucket number num is in the window ending in cur.
func live(num, cur int64) bool { return num > cur-buckets && num <= cur }

// used sums the buckets of the window ending in bucket cur.
func (w *window) used(cur int64) int64 {
	var sum int64
	for i, num := range w.nums {
		if live(num, cur) {
			sum += w.counts[i]
		}
	}
	return sum
}

// add counts n in bucket num of the window ending in cur, unless num has
// left the window or its slot holds a later bucket (which means num left).
func (w *window) add(cur, num, n int64) {
	if !live(num, cur) || n == 0 {
		return
	}
	i := slot(num)
	switch {
	case w.nums[i] == num:
		w.counts[i] += n
	case w.nums[i] < num:
		w.nums[i], w.counts[i] = num, n
	default:
		return
	}
	w.lastUse = max(w.lastUse, num)
}

// retryAfter is how long from now until use of over has expired from the
// window ending in cur, oldest bucket first; what reservations hold counts
// as used now, expiring a whole window later.
func (w *window) retryAfter(now time.Time, cur, over int64) time.Duration {
	var freed int64
	for num := cur - buckets + 1; num <= cur; num++ {
		i := slot(num)
		if w.nums[i] != num {
			continue
		}
		if freed += w.counts[i]; freed >= over {
			// Bucket num leaves the window when bucket num+buckets begins.
			end := time.Unix(0, (num+buckets)*int64(w.width))
			return ceilSecond(end.Sub(now))
		}
	}
	return ceilSecond(time.Duration(buckets) * w.width)
}

// ceilSecond rounds d up to whole seconds, at least one: Retry-After
// counts seconds, and 0 would invite an immediate retry.
func ceilSecond(d time.Duration) time.Duration {
	s := (d + time.Second - 1) / time.Second * time.Second
	return max(s, time.Second)
}
