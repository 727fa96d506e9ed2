package audit

import (
	"runtime"
	"strconv"
	"time"

	"go.uber.org/zap"
)

// Retry backoff while the log is unwritable: the writer probes by writing a
// resumed record, so recovery needs no new traffic.
const (
	retryMin = 10 * time.Millisecond
	retryMax = time.Second
)

// loop is the writer goroutine's state beyond the segment.
type loop struct {
	batch []queued  // records taken from the queue, being written
	spare []queued  // the queue's next backing array
	retry []queued  // sync: interval records accepted but not yet written
	list  []*Record // what one flush writes, in order
	note  Record    // a writer record prepended to a flush

	outage      time.Time // start of the current outage, zero when none
	outageErr   error
	refusedAt   uint64 // Refused when the outage began
	backoff     time.Duration
	checkpoints uint64 // seq at the last checkpoint
}

func (w *Writer) run() {
	defer close(w.done)
	// The writer keeps one thread, never given back (it ends with the
	// goroutine), so that the scheduling hint is on the thread that
	// calls fsync.
	runtime.LockOSThread()
	preferWakeups()
	l := loop{spare: make([]queued, 0, w.cfg.QueueSize)}
	var syncC <-chan time.Time
	if !w.always {
		// Every half interval, so that an fsync normally ends before
		// the oldest record it covers is SyncInterval old and no
		// Append has to wait for it (see Append).
		t := time.NewTicker(max(w.cfg.SyncInterval/2, time.Microsecond))
		defer t.Stop()
		syncC = t.C
	}
	cp := time.NewTicker(w.cfg.CheckpointInterval)
	defer cp.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	l.checkpoints = w.seg.seq

	// armed is set while the retry timer runs; only it probes during an
	// outage, so the probes back off.
	armed := false
	for {
		select {
		case <-w.wake:
			if l.outage.IsZero() {
				w.flush(&l)
				if w.syncAsked() {
					w.syncWritten(&l)
				}
			}
		case <-retry.C:
			armed = false
			w.flush(&l)
		case <-syncC:
			// With interval the queue is written here or when it holds
			// wakeAt records, so writes are large and few.
			if !l.outage.IsZero() {
				break
			}
			w.flush(&l)
			w.syncWritten(&l)
		case <-cp.C:
			w.checkpoint(&l)
		case <-w.quit:
			w.flush(&l)
			w.seg.close()
			if w.seg.closeErr == nil && len(l.retry) > 0 {
				w.seg.closeErr = l.outageErr
			}
			return
		}
		if !l.outage.IsZero() && !armed {
			retry.Reset(l.backoff)
			armed = true
		}
	}
}

// flush writes what is queued (after any records left from a failed
// write), fsyncs with sync: always, and acknowledges the callers.
func (w *Writer) flush(l *loop) {
	w.mu.Lock()
	l.batch, w.pending = w.pending, l.spare[:0]
	if len(l.batch) > 0 && !w.always {
		if w.unsyncedSince.IsZero() {
			w.unsyncedSince = w.pendingSince
		}
		w.pendingSince = time.Time{}
	}
	w.inflight.Store(int64(len(l.batch) + len(l.retry)))
	w.mu.Unlock()
	defer func() {
		clear(l.batch)
		l.spare = l.batch[:0]
		w.inflight.Store(int64(len(l.retry)))
	}()

	outage := !l.outage.IsZero()
	if !outage && len(l.batch) == 0 && len(l.retry) == 0 {
		return
	}
	l.list = l.list[:0]
	if outage {
		l.note = Record{TS: time.Now(), Kind: KindResumed, Detail: map[string]string{
			"error":   l.outageErr.Error(),
			"since":   l.outage.UTC().Format(tsLayout),
			"refused": strconv.FormatUint(w.st.refused.Load()-l.refusedAt, 10),
		}}
		l.list = append(l.list, &l.note)
	}
	for i := range l.retry {
		l.list = append(l.list, &l.retry[i].rec)
	}
	for i := range l.batch {
		l.list = append(l.list, &l.batch[i].rec)
	}

	n, err := w.seg.write(l.list)
	if err == nil && w.always {
		err = w.seg.sync()
	}
	// Enter the outage before acknowledging, so a caller that saw an
	// error finds Ready failing too.
	if err != nil {
		w.fail(l, err)
	}
	if outage && n > 0 {
		n--
	}
	w.keepForRetry(l, n, err)
	if err != nil {
		return
	}
	if outage {
		w.log.Info("audit log resumed", zap.Time("since", l.outage), zap.Error(l.outageErr))
		l.outage, l.outageErr = time.Time{}, nil
		w.setUp()
	}
}

// syncAsked reports whether an Append waits for an fsync (sync: interval).
func (w *Writer) syncAsked() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.syncWanted
}

// syncWritten fsyncs what the writer wrote (sync: interval); then only
// the records it could not write, if any, and those queued since it took
// its batch are unsynced, and the Appends waiting on the window look
// again.
func (w *Writer) syncWritten(l *loop) {
	if err := w.seg.sync(); err != nil {
		w.fail(l, err)
		return
	}
	w.mu.Lock()
	if len(l.retry) == 0 {
		w.unsyncedSince = time.Time{}
	}
	w.syncWanted = false
	w.wakeWaitersLocked()
	w.mu.Unlock()
}

// keepForRetry acknowledges the batch and keeps the records a failed write
// did not reach the file. With sync: always every caller in a failed batch
// gets the error (its record may be on disk, but its fsync did not
// happen), and nothing is retried: those callers deny. With interval the
// callers already went on, so their records stay queued until written.
func (w *Writer) keepForRetry(l *loop, written int, err error) {
	if w.always {
		if err != nil {
			w.st.refused.Add(uint64(len(l.batch)))
		}
		for i := range l.batch {
			l.batch[i].ack <- wrapUnavailable(err)
		}
		return
	}
	all := len(l.retry) + len(l.batch)
	if err == nil || written >= all {
		clear(l.retry)
		l.retry = l.retry[:0]
		return
	}
	var rest []queued
	if written < len(l.retry) {
		rest = append(rest, l.retry[written:]...)
		rest = append(rest, l.batch...)
	} else {
		rest = append(rest, l.batch[written-len(l.retry):]...)
	}
	l.retry = rest
}

func wrapUnavailable(err error) error {
	if err == nil {
		return nil
	}
	return &unavailableError{err}
}

type unavailableError struct{ err error }

func (e *unavailableError) Error() string   { return ErrUnavailable.Error() + ": " + e.err.Error() }
func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

// fail enters (or extends) an outage: Append refuses until a probe write
// succeeds.
func (w *Writer) fail(l *loop, err error) {
	if l.outage.IsZero() {
		l.outage = time.Now()
		l.refusedAt = w.st.refused.Load()
		l.backoff = retryMin
	} else if l.backoff *= 2; l.backoff > retryMax {
		l.backoff = retryMax
	}
	l.outageErr = err
	w.setDown(err)
}

// checkpoint logs the chain head and, with a signing key, writes it as a
// signed record.
func (w *Writer) checkpoint(l *loop) {
	if w.seg.seq == l.checkpoints || !l.outage.IsZero() {
		return
	}
	w.log.Info("audit checkpoint", zap.Uint64("seq", w.seg.seq), zap.String("hash", w.seg.headHex()),
		zap.String("segment", w.seg.name))
	if w.signer == nil {
		l.checkpoints = w.seg.seq
		return
	}
	rec := signCheckpoint(w.signer, w.seg.seq, w.seg.headHex())
	if _, err := w.seg.write([]*Record{&rec}); err != nil {
		w.fail(l, err)
		return
	}
	if w.always {
		if err := w.seg.sync(); err != nil {
			w.fail(l, err)
			return
		}
	}
	l.checkpoints = w.seg.seq
}
