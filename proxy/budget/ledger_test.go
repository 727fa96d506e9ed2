package budget

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// t0 is a start time on a boundary of every bucket width used here
// (1s, 1.5s, 24m).
var t0 = time.Unix(19676*86400, 0)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: t0} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

var k = Key{Identity: "sandbox-1", Scope: "rule-a"}

func TestReserve(t *testing.T) {
	type use struct {
		ago time.Duration // before now; negative is after now
		n   int64
	}
	tests := []struct {
		name     string
		per      time.Duration
		limit    int64
		now      time.Duration // after t0
		used     []use
		reserved int64 // held by a reservation not settled
		n        int64
		wantOK   bool
		retry    time.Duration
	}{
		{name: "empty", per: time.Minute, limit: 100, n: 10, wantOK: true},
		{name: "up to the limit", per: time.Minute, limit: 100, used: []use{{0, 90}}, n: 10, wantOK: true},
		{name: "over by one", per: time.Minute, limit: 100, used: []use{{0, 91}}, n: 10, retry: time.Minute},
		{name: "zero fits a full budget", per: time.Minute, limit: 100, used: []use{{0, 100}}, n: 0, wantOK: true},
		{name: "oldest use expires first", per: time.Minute, limit: 100,
			used: []use{{30 * time.Second, 50}, {0, 50}}, n: 10, retry: 30 * time.Second},
		{name: "enough must expire", per: time.Minute, limit: 100,
			used: []use{{40 * time.Second, 5}, {20 * time.Second, 30}, {0, 60}}, n: 30, retry: 40 * time.Second},
		{name: "59s old use still counts", per: time.Minute, limit: 100, used: []use{{59 * time.Second, 100}}, n: 1,
			retry: time.Second},
		{name: "60s old use expired", per: time.Minute, limit: 100, used: []use{{time.Minute, 100}}, n: 100, wantOK: true},
		{name: "older than the window ignored", per: time.Minute, limit: 100, used: []use{{time.Hour, 100}}, n: 100,
			wantOK: true},
		{name: "future use counts as now", per: time.Minute, limit: 100, used: []use{{-time.Hour, 100}}, n: 1,
			retry: time.Minute},
		{name: "n over the limit alone waits the window", per: time.Hour, limit: 100, n: 101, retry: time.Hour},
		{name: "reservations count as used now", per: time.Minute, limit: 100, reserved: 95, n: 10, retry: time.Minute},
		{name: "reservation fits beside another", per: time.Minute, limit: 100, reserved: 90, n: 10, wantOK: true},
		{name: "retry rounded up to seconds", per: 90 * time.Second, limit: 100, now: 400 * time.Millisecond,
			used: []use{{0, 100}}, n: 1, retry: 90 * time.Second},
		{name: "day window in 24m buckets", per: 24 * time.Hour, limit: 100, used: []use{{time.Hour, 100}}, n: 1,
			// The hour-old use is in the bucket that began 72m ago.
			retry: 24*time.Hour - 72*time.Minute},
		{name: "non-positive period refuses", per: 0, limit: 100, n: 1, retry: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClock()
			c.advance(tt.now)
			l := NewLedger(c.now)
			for _, u := range tt.used {
				l.Add(k, tt.per, c.now().Add(-u.ago), u.n)
			}
			if tt.reserved > 0 {
				if _, _, ok := l.Reserve(k, tt.limit, tt.per, tt.reserved); !ok {
					t.Fatalf("Reserve(%d) refused", tt.reserved)
				}
			}
			r, retry, ok := l.Reserve(k, tt.limit, tt.per, tt.n)
			if ok != tt.wantOK || retry != tt.retry || (r != nil) != ok {
				t.Fatalf("Reserve(%d) = %v, %v, %v; want %v, %v", tt.n, r, retry, ok, tt.wantOK, tt.retry)
			}
		})
	}
}

func TestSettle(t *testing.T) {
	c := newClock()
	l := NewLedger(c.now)
	r, _, ok := l.Reserve(k, 100, time.Minute, 50)
	if !ok {
		t.Fatal("Reserve(50) refused")
	}
	if _, _, ok := l.Reserve(k, 100, time.Minute, 51); ok {
		t.Fatal("Reserve(51) beside 50 reserved admitted; want refused")
	}
	if got := l.Used(k, time.Minute); got != 0 {
		t.Fatalf("Used with a reservation = %d; want 0", got)
	}
	c.advance(10 * time.Second)
	r.Settle(20)
	r.Settle(40) // once only
	r.Release()
	if got := l.Used(k, time.Minute); got != 20 {
		t.Fatalf("Used after Settle(20) = %d; want 20", got)
	}
	if _, _, ok := l.Reserve(k, 100, time.Minute, 80); !ok {
		t.Fatal("Reserve(80) beside 20 used refused")
	}
	// Settled use counts from when it was settled.
	c.advance(55 * time.Second)
	if got := l.Used(k, time.Minute); got != 20 {
		t.Fatalf("Used 55s after settling = %d; want 20", got)
	}
	c.advance(5 * time.Second)
	if got := l.Used(k, time.Minute); got != 0 {
		t.Fatalf("Used 60s after settling = %d; want 0", got)
	}

	r2, _, _ := l.Reserve(Key{"b", "bytes"}, 100, time.Minute, 100)
	r2.Release()
	if _, _, ok := l.Reserve(Key{"b", "bytes"}, 100, time.Minute, 100); !ok {
		t.Fatal("Reserve(100) after Release refused")
	}
}

func TestKeysAndPeriodsApart(t *testing.T) {
	c := newClock()
	l := NewLedger(c.now)
	l.Add(k, time.Minute, c.now(), 100)
	for _, other := range []struct {
		k   Key
		per time.Duration
	}{{Key{"sandbox-2", "rule-a"}, time.Minute}, {Key{"sandbox-1", "rule-b"}, time.Minute}, {k, time.Hour}} {
		if _, _, ok := l.Reserve(other.k, 100, other.per, 100); !ok {
			t.Fatalf("Reserve(%v per %v) refused by another key's use", other.k, other.per)
		}
	}
}

// TestIdleKeysDropped pins the bounded memory: a key idle for a whole
// window is dropped, one holding a reservation is not, and a settle after
// a sweep still counts.
func TestIdleKeysDropped(t *testing.T) {
	c := newClock()
	l := NewLedger(c.now)
	l.Add(Key{"idle", "bytes"}, time.Minute, c.now(), 5)
	held, _, _ := l.Reserve(Key{"held", "bytes"}, 100, time.Minute, 5)
	empty, _, _ := l.Reserve(Key{"empty", "bytes"}, 100, time.Minute, 0)
	c.advance(2 * time.Minute)
	l.Reserve(Key{"other", "bytes"}, 100, time.Minute, 1) // sweeps
	if _, ok := l.windows[windowKey{Key{"idle", "bytes"}, time.Minute}]; ok {
		t.Fatal("idle key kept after a whole window")
	}
	if _, ok := l.windows[windowKey{Key{"held", "bytes"}, time.Minute}]; !ok {
		t.Fatal("key holding a reservation dropped")
	}
	if len(l.windows) != 2 {
		t.Fatalf("ledger holds %d windows; want 2 (held, other)", len(l.windows))
	}
	held.Settle(7)
	empty.Settle(3)
	if got := l.Used(Key{"empty", "bytes"}, time.Minute); got != 3 {
		t.Fatalf("Used after settling a swept reservation = %d; want 3", got)
	}
	if got := l.Used(Key{"held", "bytes"}, time.Minute); got != 7 {
		t.Fatalf("Used(held) = %d; want 7", got)
	}
}

// TestConcurrentOvershoot races reservations of one key on one window and
// checks the guarantee: use never exceeds limit plus what requests used
// beyond their reservation, and with none, never exceeds limit.
func TestConcurrentOvershoot(t *testing.T) {
	for _, excess := range []bool{false, true} {
		c := newClock()
		l := NewLedger(c.now)
		const limit, workers, rounds = 1000, 8, 200
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			overuse  int64
			admitted int
		)
		for w := range workers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), 0))
				for range rounds {
					n := 1 + rng.Int64N(50)
					r, _, ok := l.Reserve(k, limit, time.Hour, n)
					if !ok {
						continue
					}
					actual := rng.Int64N(n + 1)
					if excess && rng.IntN(4) == 0 {
						actual = n + rng.Int64N(20)
					}
					mu.Lock()
					overuse += max(actual-n, 0)
					admitted++
					mu.Unlock()
					r.Settle(actual)
				}
			})
		}
		wg.Wait()
		if admitted == 0 {
			t.Fatal("no reservation admitted")
		}
		if got := l.Used(k, time.Hour); got > limit+overuse {
			t.Fatalf("excess %v: Used = %d; want <= %d + %d", excess, got, limit, overuse)
		}
		if !excess && l.Used(k, time.Hour) > limit {
			t.Fatalf("Used = %d over limit %d with no request over its reservation", l.Used(k, time.Hour), limit)
		}
	}
}
