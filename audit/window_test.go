package audit

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testwait"
)

// heldSync is a segment file whose fsync blocks while the test holds it:
// a disk as slow as the test wants, without timing.
type heldSync struct {
	*os.File
	d *syncGate
}

type syncGate struct {
	entered chan struct{} // one send per fsync that started while held
	mu      sync.Mutex
	release chan struct{} // if not nil, fsyncs wait until it is closed
}

func (g *syncGate) hold() {
	g.mu.Lock()
	g.release = make(chan struct{})
	g.mu.Unlock()
}

func (g *syncGate) let() {
	g.mu.Lock()
	if g.release != nil {
		close(g.release)
		g.release = nil
	}
	g.mu.Unlock()
}

func (f heldSync) Sync() error {
	f.d.mu.Lock()
	release := f.d.release
	f.d.mu.Unlock()
	if release != nil {
		select {
		case f.d.entered <- struct{}{}:
		default:
		}
		<-release
	}
	return f.File.Sync()
}

// TestIntervalWindowBoundedWhileFsyncStalls: with sync: interval and an
// fsync that does not return, Appends are acknowledged for at most
// SyncInterval after the oldest record the stalled fsync has to make
// durable, then wait for it (SIGKILL lost 413 of 40,279 acknowledged
// requests, a 72-335 ms window with a 10 ms interval, while the writer fell
// behind). Once the fsync returns, the waiters are acknowledged and every
// acknowledged record is in the log.
func TestIntervalWindowBoundedWhileFsyncStalls(t *testing.T) {
	c := testConfig(t, "interval")
	c.SyncInterval = 5 * time.Millisecond
	c.QueueSize = 1 << 16
	g := &syncGate{entered: make(chan struct{}, 1)}
	old := wrapSegment
	wrapSegment = func(f *os.File) segFile { return heldSync{f, g} }
	t.Cleanup(func() { wrapSegment = old })
	w := mustOpen(t, c) // its header's fsync passes
	g.hold()
	t.Cleanup(g.let)

	if err := w.Append(decisionRecord(0)); err != nil {
		t.Fatalf("Append(0) = %v", err)
	}
	<-g.entered // the writer took record 0 and is stuck in its fsync

	// Four appenders go on until the writer makes them wait.
	var acked atomic.Int64
	acked.Store(1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for a := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := w.Append(decisionRecord(a*1_000_000 + i)); err != nil {
					errs <- err
					return
				}
				acked.Add(1)
			}
		}()
	}
	// Polled: the wait starts once SyncInterval has passed on the clock.
	testwait.For(t, "all 4 appenders to wait for the stalled fsync", 10*time.Second, func() error {
		if n := w.Stats().SyncWaits; n < 4 {
			return fmt.Errorf("%d Appends wait for it (%d acknowledged)", n, acked.Load())
		}
		return nil
	})
	st := w.Stats()
	if st.MaxUnsyncedSpan > c.SyncInterval {
		t.Errorf("MaxUnsyncedSpan = %v with the fsync stalled; want <= sync_interval %v", st.MaxUnsyncedSpan, c.SyncInterval)
	}
	close(stop)
	g.let()
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("Append = %v; want the waiters acknowledged once the fsync returned", err)
	default:
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if st := w.Stats(); st.MaxUnsyncedSpan > c.SyncInterval {
		t.Errorf("MaxUnsyncedSpan = %v; want <= sync_interval %v", st.MaxUnsyncedSpan, c.SyncInterval)
	}
	n := 0
	for _, r := range readRecords(t, c.Dir) {
		if r.Kind == "http" {
			n++
		}
	}
	if int64(n) != acked.Load() {
		t.Errorf("log holds %d of %d acknowledged records", n, acked.Load())
	}
}
