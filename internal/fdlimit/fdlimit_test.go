package fdlimit

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// fakeCount reports open descriptors and counts the calls. Tests set it
// while a listener's goroutine reads it.
type fakeCount struct {
	open  atomic.Int64
	calls atomic.Int64
	err   error
}

func newFakeCount(open int, err error) *fakeCount {
	f := &fakeCount{err: err}
	f.open.Store(int64(open))
	return f
}

func (f *fakeCount) count() (int, error) {
	f.calls.Add(1)
	return int(f.open.Load()), f.err
}

type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Unix(1, 0).UnixNano())
	return c
}

func (c *fakeClock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) add(d time.Duration) { c.ns.Add(int64(d)) }

func TestReserve(t *testing.T) {
	for _, tt := range []struct {
		limit uint64
		want  int
	}{{64, 32}, {1024, 128}, {20000, 2500}, {1 << 20, 4096}} {
		if got := Reserve(tt.limit); got != tt.want {
			t.Errorf("Reserve(%d) = %d; want %d", tt.limit, got, tt.want)
		}
	}
}

// TestBudgetRefusesBeforeReserve: a connection is admitted only if its
// PerConn descriptors leave the reserve free, counting again when the
// estimate comes close, and a failed count (EMFILE) refuses.
func TestBudgetRefusesBeforeReserve(t *testing.T) {
	tests := []struct {
		name  string
		open  int
		err   error
		admit bool
	}{
		{"plenty", 100, nil, true},
		{"exactly room", 256 - 32 - PerConn, nil, true},
		{"one short", 256 - 32 - PerConn + 1, nil, false},
		{"full", 256, nil, false},
		{"count fails", 10, syscall.EMFILE, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeCount(tt.open, tt.err)
			b := newBudget(256, 32, fc.count, newFakeClock().now)
			if got := b.Admit(); got != tt.admit {
				t.Errorf("Admit() with %d open, err %v = %v; want %v", tt.open, tt.err, got, tt.admit)
			}
		})
	}
}

// TestBudgetChargesAdmissionsAndCountsRarely: between counts each admitted
// connection is charged PerConn, so the budget counts again before the
// estimate could overrun the reserve; far from the limit it counts once
// per interval.
func TestBudgetChargesAdmissionsAndCountsRarely(t *testing.T) {
	clk := newFakeClock()
	fc := newFakeCount(100, nil)
	b := newBudget(1<<20, 4096, fc.count, clk.now)
	for range 10000 {
		if !b.Admit() {
			t.Fatal("Admit() = false far from the limit")
		}
	}
	if fc.calls.Load() != 1 {
		t.Errorf("far from the limit, 10000 admissions counted %d times; want 1", fc.calls.Load())
	}
	clk.add(recount)
	b.Admit()
	if fc.calls.Load() != 2 {
		t.Errorf("after %v, counts = %d; want 2", recount, fc.calls.Load())
	}

	// Near the limit: 100 open of 256, reserve 32, room for
	// (256-32-100)/4 = 31 connections, charged without counting again
	// (the fake count never moves); the 32nd needs a count, which finds
	// room again.
	fc = newFakeCount(100, nil)
	b = newBudget(256, 32, fc.count, clk.now)
	for i := range 31 {
		if !b.Admit() {
			t.Fatalf("admission %d refused", i)
		}
	}
	if fc.calls.Load() != 1 {
		t.Errorf("31 admissions within the estimated room counted %d times; want 1", fc.calls.Load())
	}
	if !b.Admit() || fc.calls.Load() != 2 {
		t.Errorf("the admission past the estimated room: refused or uncounted (%d counts); want counted and admitted", fc.calls.Load())
	}
}

// TestBudgetHysteresis: once refusing, the budget admits again only with
// a quarter of the reserve more free than it takes to start refusing, so
// that descriptors hovering at the edge do not make it flap.
func TestBudgetHysteresis(t *testing.T) {
	clk := newFakeClock()
	fc := newFakeCount(0, nil)
	b := newBudget(256, 32, fc.count, clk.now)
	// Admitting needs 32+4 free (open <= 220); once refusing, 32+4+8
	// (open <= 212).
	for _, step := range []struct {
		open  int64
		admit bool
	}{{221, false}, {215, false}, {213, false}, {212, true}, {220, true}, {221, false}} {
		fc.open.Store(step.open)
		clk.add(recount)
		if got := b.Admit(); got != step.admit {
			t.Errorf("Admit() with %d open = %v; want %v", step.open, got, step.admit)
		}
	}
}

// TestBudgetGapFollowsCountCost: while short, a count that takes long (a
// large /proc/self/fd read directory-wise) spaces the next one by
// gapFactor times its duration, refusing on the estimate in between.
func TestBudgetGapFollowsCountCost(t *testing.T) {
	clk := newFakeClock()
	calls := 0
	slow := func() (int, error) {
		calls++
		clk.add(5 * time.Millisecond)
		return 250, nil
	}
	b := newBudget(256, 32, slow, clk.now)
	for range 1000 {
		if b.Admit() {
			t.Fatal("Admit() = true with 250 of 256 open")
		}
	}
	if calls != 1 {
		t.Errorf("1000 refusals within %v of a 5ms count counted %d times; want 1", gapFactor*5*time.Millisecond, calls)
	}
	clk.add(gapFactor * 5 * time.Millisecond)
	b.Admit()
	if calls != 2 {
		t.Errorf("counts after the gap = %d; want 2", calls)
	}
}

// TestCountOpen counts this process's descriptors as /proc/self/fd lists
// them, and sees ten more files opened.
func TestCountOpen(t *testing.T) {
	before, err := countOpen()
	if err != nil {
		t.Fatalf("countOpen: %v", err)
	}
	var files []*os.File
	for range 10 {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	after, err := countOpen()
	dirBefore, dirErr := countDir()
	for _, f := range files {
		f.Close()
	}
	if err != nil || after-before != 10 {
		t.Errorf("countOpen() = %d, %v after opening 10 files; want %d", after, err, before+10)
	}
	if dirErr != nil || dirBefore != after {
		t.Errorf("countDir() = %d, %v; want countOpen()'s %d", dirBefore, dirErr, after)
	}
	if _, err := countOpen(); errors.Is(err, errUnsupported) {
		t.Errorf("countOpen() is unsupported on this platform")
	}
}

// BenchmarkCountOpen and BenchmarkCountDir count with 4096 more
// descriptors open than the test binary has: the cost of one count by
// stat (Linux 6.2 and later) and by reading the directory.
func BenchmarkCountOpen(b *testing.B) { benchCount(b, countOpen) }
func BenchmarkCountDir(b *testing.B)  { benchCount(b, countDir) }

func benchCount(b *testing.B, count func() (int, error)) {
	b.ReportAllocs()
	for range 4096 {
		f, err := os.Open(os.DevNull)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
	}
	for b.Loop() {
		if _, err := count(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBudgetServesBurstWithinBudget: a burst of connections that together
// hold fewer descriptors than the limit less the reserve is served whole,
// even when a count is slow enough (a loaded machine) that the whole burst
// arrives within the gap after one. Each connection here holds one
// descriptor (a gate client before its login), well below the PerConn the
// estimate charges it: only a count, never that estimate, may refuse.
func TestBudgetServesBurstWithinBudget(t *testing.T) {
	const (
		limit    = 128
		reserve  = 32
		baseline = 20 // descriptors an idle egressd holds
		burst    = 64 // 20 + 64 + 32 + PerConn <= 128: within the budget
	)
	clk := newFakeClock()
	held := 0
	counts := 0
	count := func() (int, error) {
		counts++
		clk.add(100 * time.Microsecond) // a 2ms gap: longer than the burst
		return baseline + held, nil
	}
	b := newBudget(limit, reserve, count, clk.now)
	for i := range burst {
		held++ // accepted: its socket is open when Admit is asked
		if !b.Admit() {
			t.Fatalf("connection %d of a burst of %d refused with %d of %d descriptors open (reserve %d, %d counts)",
				i, burst, baseline+held, limit, reserve, counts)
		}
	}
	// One descriptor past the budget, at the next count, is refused.
	held = limit - reserve - PerConn - baseline + 1
	clk.add(recount)
	if b.Admit() {
		t.Errorf("Admit() with %d of %d open = true; want false", baseline+held, limit)
	}
}
