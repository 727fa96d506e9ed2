// Package audittest is the one in-memory audit.Appender for tests: it keeps
// every record appended, can be told to fail as a full disk does, and lets a
// test wait for a record on a signal from Append instead of polling.
package audittest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
)

// ErrFull is what Append returns while the recorder is set to fail.
var ErrFull = errors.New("disk full")

// waitLimit bounds Wait so that a record that never comes fails the test
// instead of hanging it. It is a safety net, not a timing assertion.
const waitLimit = 30 * time.Second

// Recorder is a concurrency-safe audit.Appender that keeps a copy of every
// record. The zero value is ready to use.
type Recorder struct {
	mu      sync.Mutex
	recs    []audit.Record
	fail    bool
	discard bool
	// appended is closed (and replaced) by every Append that keeps a
	// record, waking every Wait.
	appended chan struct{}
}

var _ audit.Appender = (*Recorder)(nil)

// Sink is an audit.Appender that keeps no record and returns Err from
// every Append (nil: accepts them). Sink{} is the discarding log of
// benchmarks, with no lock to measure; Sink{Err: e} a log that refuses
// with e.
type Sink struct{ Err error }

// Append returns s.Err.
func (s Sink) Append(*audit.Record) error { return s.Err }

// Append keeps a copy of r, or returns ErrFull while SetFail(true) holds.
func (r *Recorder) Append(rec *audit.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail {
		return ErrFull
	}
	if r.discard {
		return nil
	}
	r.recs = append(r.recs, *rec)
	if r.appended != nil {
		close(r.appended)
		r.appended = nil
	}
	return nil
}

// SetFail makes Append fail with ErrFull (true) or succeed again (false).
func (r *Recorder) SetFail(fail bool) {
	r.mu.Lock()
	r.fail = fail
	r.mu.Unlock()
}

// SetDiscard makes Append accept records without keeping them, for
// benchmarks that would otherwise measure the recorder's growth.
func (r *Recorder) SetDiscard(discard bool) {
	r.mu.Lock()
	r.discard = discard
	r.mu.Unlock()
}

// Records is a copy of the records kept so far, in append order.
func (r *Recorder) Records() []audit.Record {
	return r.Since(0)
}

// Since is a copy of the records kept after the first n.
func (r *Recorder) Since(n int) []audit.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]audit.Record(nil), r.recs[min(n, len(r.recs)):]...)
}

// Len is how many records have been kept.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.recs)
}

// Last is the latest record kept, or the zero record when none is.
func (r *Recorder) Last() audit.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.recs) == 0 {
		return audit.Record{}
	}
	return r.recs[len(r.recs)-1]
}

// Wait blocks until cond holds over the records kept so far and returns
// them. It checks again after every Append, never on a timer; it fails the
// test, naming the records, if cond still does not hold after a generous
// limit. cond runs with the recorder locked: it must not call its methods.
func (r *Recorder) Wait(tb testing.TB, cond func(recs []audit.Record) bool) []audit.Record {
	tb.Helper()
	limit := time.NewTimer(waitLimit)
	defer limit.Stop()
	for {
		r.mu.Lock()
		if cond(r.recs) {
			recs := append([]audit.Record(nil), r.recs...)
			r.mu.Unlock()
			return recs
		}
		if r.appended == nil {
			r.appended = make(chan struct{})
		}
		appended := r.appended
		r.mu.Unlock()
		select {
		case <-appended:
		case <-limit.C:
			tb.Fatalf("audittest: no record came that the test waits for; have %s", Summary(r.Records()))
			return nil
		}
	}
}

// WaitRecord blocks until a record matching match has been kept (perhaps
// already) and returns the first such record. See Wait.
func (r *Recorder) WaitRecord(tb testing.TB, match func(audit.Record) bool) audit.Record {
	tb.Helper()
	var found audit.Record
	r.Wait(tb, func(recs []audit.Record) bool {
		for _, rec := range recs {
			if match(rec) {
				found = rec
				return true
			}
		}
		return false
	})
	return found
}

// Summary is "kind:decision:reason" of each record, comma-separated: a
// compact form for assertions and failure messages.
func Summary(recs []audit.Record) string {
	b := make([]byte, 0, 32*len(recs))
	for i, rec := range recs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, rec.Kind...)
		b = append(b, ':')
		b = append(b, rec.Decision...)
		b = append(b, ':')
		b = append(b, rec.Reason...)
	}
	return string(b)
}
