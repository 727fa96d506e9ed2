package audit

import (
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// ErrUnavailable is wrapped by every error Append returns: the record was
// not accepted and the caller must deny with reason "audit_unavailable".
var ErrUnavailable = errors.New("audit log unavailable")

// ErrQueueFull means the writer is behind by QueueSize records.
var ErrQueueFull = fmt.Errorf("%w: queue full", ErrUnavailable)

// ErrClosed means Append was called after Close.
var ErrClosed = fmt.Errorf("%w: closed", ErrUnavailable)

// maxRecordInput bounds the raw bytes of a record's strings; escaped they
// stay below maxLine, the longest line the verifier reads.
const (
	maxRecordInput = 128 << 10
	maxLine        = 1 << 20
)

// Writer appends records to the log. One goroutine owns the files; Append
// hands records to it through a bounded queue.
type Writer struct {
	cfg    Config
	log    *zap.Logger
	always bool
	signer ed25519.PrivateKey
	redact []string // query parameter name fragments

	mu      sync.Mutex
	pending []queued // guarded by mu
	closing bool     // guarded by mu
	down    error    // guarded by mu; non-nil while writes fail

	// The durability window of sync: interval, guarded by mu (see
	// behindLocked): when the oldest record in pending was accepted, and
	// the oldest of those the writer took but has not fsynced (records it
	// could not write included). synced is closed and replaced when that
	// window shrinks, the log goes down or closes, to wake the Appends
	// waiting on it; syncWanted asks the writer to fsync at its next wake.
	// maxSpan is the longest span of acknowledgements a crash could have
	// lost (Stats.MaxUnsyncedSpan).
	pendingSince  time.Time
	unsyncedSince time.Time
	synced        chan struct{}
	syncWanted    bool
	maxSpan       time.Duration

	// wake asks the writer to flush now: on every Append with sync:
	// always, once wakeAt records wait with interval (else the sync tick
	// flushes).
	wake   chan struct{}
	wakeAt int
	quit   chan struct{}
	done   chan struct{}

	inflight atomic.Int64
	st       stats

	seg segState // owned by the run goroutine after Open returns
}

type queued struct {
	rec Record
	ack chan error // nil unless sync: always
}

// ackPool recycles the one-shot channels of sync: always callers, so a
// durable Append allocates nothing in the steady state.
var ackPool = sync.Pool{New: func() any { return make(chan error, 1) }}

// Open recovers the log in cfg.Dir (see recover.go) and starts the writer.
// It fails when the newest segment's chain is broken, unless
// cfg.AcceptBreak is set.
func Open(cfg Config, log *zap.Logger) (*Writer, error) {
	cfg.Provision()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("audit config: %w", err)
	}
	w := &Writer{
		cfg:    cfg,
		log:    log.Named("audit"),
		always: cfg.Sync == "always",
		redact: cfg.RedactQueryParams,
		wake:   make(chan struct{}, 1),
		synced: make(chan struct{}),
		wakeAt: max(1, min(cfg.QueueSize/4, 1024)),
		quit:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	if cfg.SigningKey != "" {
		k, err := LoadPrivateKey(cfg.SigningKey)
		if err != nil {
			return nil, err
		}
		w.signer = k
	}
	// The queue and the writer's batch swap two arrays of QueueSize, so
	// Append never grows (copies) the queue under the lock. Pages are only
	// touched as the queue fills.
	w.pending = make([]queued, 0, cfg.QueueSize)
	w.seg.init(cfg, &w.st)
	if err := w.recover(); err != nil {
		w.seg.close()
		return nil, err
	}
	if cfg.Started != nil {
		if err := w.writeStarted(cfg.Started); err != nil {
			w.seg.close()
			return nil, err
		}
	}
	w.log.Info("audit log open", zap.String("dir", cfg.Dir), zap.String("segment", w.seg.name),
		zap.Uint64("seq", w.seg.seq), zap.String("head", w.seg.headHex()), zap.String("sync", cfg.Sync))
	go w.run()
	return w, nil
}

// Append queues a copy of r (r.Detail is shared and must not change
// afterwards), its query redacted and its strings capped (see prepare).
// With sync: always it returns once the record is on disk and fsynced;
// with interval once it is queued, but while the oldest acknowledged
// record not yet fsynced is older than SyncInterval it first waits for
// the writer's fsync: so a crash loses at most the records acknowledged
// within one SyncInterval, however slow the disk or loaded the machine.
// TS is set to now when zero; Seq, Prev and Hash are assigned by the
// writer. An error wraps ErrUnavailable.
func (w *Writer) Append(in *Record) error {
	rec := *in
	r := &rec
	w.prepare(r)
	if n := len(r.Request) + len(r.Identity) + len(r.Client) + len(r.Method) + len(r.Scheme) +
		len(r.Host) + len(r.Path) + len(r.Name) + len(r.QType) + len(r.Database) + len(r.SQL) +
		len(r.Fingerprint) + len(r.IP) + len(r.Decision) + len(r.Reason) + len(r.Rule) +
		len(r.Policy) + len(r.Error) + len(r.Kind) + len(r.User) + len(r.Query) + len(r.Truncated) + detailLen(r.Detail); n > maxRecordInput {
		w.st.refused.Add(1)
		return fmt.Errorf("%w: record of %d bytes exceeds %d", ErrUnavailable, n, maxRecordInput)
	}
	var ack chan error
	if w.always {
		ack = ackPool.Get().(chan error)
	}
	w.mu.Lock()
	var err error
	now := time.Now()
	waited := false
	for {
		switch {
		case w.closing:
			err = ErrClosed
		case w.down != nil:
			err = w.down
		case len(w.pending) >= w.cfg.QueueSize:
			err = ErrQueueFull
			w.st.queueFull.Add(1)
		}
		if err != nil || w.always || !w.behindLocked(now) {
			break
		}
		if !waited {
			waited = true
			w.st.syncWaits.Add(1)
		}
		synced := w.synced
		w.syncWanted = true
		w.mu.Unlock()
		select {
		case w.wake <- struct{}{}:
		default:
		}
		select {
		case <-synced:
		case <-w.quit:
		}
		w.mu.Lock()
		now = time.Now()
	}
	if err != nil {
		w.mu.Unlock()
		w.st.refused.Add(1)
		if ack != nil {
			ackPool.Put(ack)
		}
		return err
	}
	w.pending = append(w.pending, queued{rec: *r, ack: ack})
	n := len(w.pending)
	if q := &w.pending[n-1].rec; q.TS.IsZero() {
		q.TS = now
	}
	if !w.always {
		w.acceptedLocked(now)
	}
	w.mu.Unlock()
	w.st.appended.Add(1)
	if ack != nil || n >= w.wakeAt {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	if ack == nil {
		return nil
	}
	err = <-ack
	ackPool.Put(ack)
	return err
}

func detailLen(d map[string]string) int {
	n := 0
	for k, v := range d {
		n += len(k) + len(v)
	}
	return n
}

// behindLocked reports whether the oldest acknowledged record not yet
// fsynced was accepted more than SyncInterval before now.
func (w *Writer) behindLocked(now time.Time) bool {
	oldest := w.oldestUnsyncedLocked()
	return !oldest.IsZero() && now.Sub(oldest) > w.cfg.SyncInterval
}

func (w *Writer) oldestUnsyncedLocked() time.Time {
	if w.unsyncedSince.IsZero() {
		return w.pendingSince
	}
	return w.unsyncedSince
}

// acceptedLocked accounts for a record accepted at now with sync:
// interval: the span from the oldest acknowledged record not yet fsynced
// to now is what a crash at this moment could lose.
func (w *Writer) acceptedLocked(now time.Time) {
	if w.pendingSince.IsZero() {
		w.pendingSince = now
	}
	if span := now.Sub(w.oldestUnsyncedLocked()); span > w.maxSpan {
		w.maxSpan = span
	}
}

// wakeWaitersLocked wakes the Appends waiting for an fsync, to look again.
func (w *Writer) wakeWaitersLocked() {
	close(w.synced)
	w.synced = make(chan struct{})
}

// Ready returns nil when the log accepts records, for /readyz.
func (w *Writer) Ready() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.closing:
		return ErrClosed
	case w.down != nil:
		return w.down
	case len(w.pending) >= w.cfg.QueueSize:
		return ErrQueueFull
	}
	return nil
}

// QueueDepth is the number of accepted records not yet written.
func (w *Writer) QueueDepth() int {
	w.mu.Lock()
	n := len(w.pending)
	w.mu.Unlock()
	return n + int(w.inflight.Load())
}

// Close writes and fsyncs what is queued, then closes the segment. Appends
// after Close fail with ErrClosed. It returns the writer's last error if
// queued records could not be written.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closing {
		w.mu.Unlock()
		<-w.done
		return nil
	}
	w.closing = true
	w.mu.Unlock()
	close(w.quit)
	<-w.done
	return w.seg.closeErr
}

// Head returns the seq and hash of the last record written.
func (w *Writer) Head() (uint64, string) {
	return w.st.seq.Load(), w.st.headHex()
}

// stats are the writer's counters, read by Stats.
type stats struct {
	appended, written, refused, queueFull atomic.Uint64
	writeErrors, syncErrors, syncs        atomic.Uint64
	syncWaits                             atomic.Uint64
	bytes, segments, seq                  atomic.Uint64
	head                                  atomic.Pointer[[sha256.Size]byte]
}

func (s *stats) headHex() string {
	if h := s.head.Load(); h != nil {
		return fmt.Sprintf("%x", h[:])
	}
	return fmt.Sprintf("%x", zeroHash[:])
}

// Stats is a snapshot of the writer's counters, for metrics.
type Stats struct {
	// Appended counts records accepted by Append.
	Appended uint64
	// Refused counts Appends that returned an error (queue full, log down,
	// closed, too large): each one is a deny with audit_unavailable.
	Refused uint64
	// QueueFull counts the refusals due to a full queue.
	QueueFull uint64
	// Written counts lines written, writer records included.
	Written uint64
	// WriteErrors and SyncErrors count failed write and fsync calls.
	WriteErrors, SyncErrors uint64
	// Syncs counts fsync calls.
	Syncs uint64
	// SyncWaits counts the Appends (sync: interval) that waited for an
	// fsync because the oldest acknowledged record not yet fsynced was
	// older than SyncInterval.
	SyncWaits uint64
	// MaxUnsyncedSpan is the longest span, since Open, between the oldest
	// acknowledged record not yet fsynced and a record acknowledged after
	// it: what a crash could have lost at worst, in time. The wait above
	// holds it to SyncInterval.
	MaxUnsyncedSpan time.Duration
	// Bytes counts bytes written.
	Bytes uint64
	// Segments counts segment files this writer created.
	Segments uint64
	// Seq is the last sequence number written.
	Seq uint64
	// QueueDepth is QueueDepth().
	QueueDepth int
}

// Stats returns the counters.
func (w *Writer) Stats() Stats {
	w.mu.Lock()
	span := w.maxSpan
	w.mu.Unlock()
	return Stats{
		MaxUnsyncedSpan: span,
		Appended:        w.st.appended.Load(),
		Refused:         w.st.refused.Load(),
		QueueFull:       w.st.queueFull.Load(),
		Written:         w.st.written.Load(),
		WriteErrors:     w.st.writeErrors.Load(),
		SyncErrors:      w.st.syncErrors.Load(),
		Syncs:           w.st.syncs.Load(),
		SyncWaits:       w.st.syncWaits.Load(),
		Bytes:           w.st.bytes.Load(),
		Segments:        w.st.segments.Load(),
		Seq:             w.st.seq.Load(),
		QueueDepth:      w.QueueDepth(),
	}
}

func (w *Writer) setDown(err error) {
	w.mu.Lock()
	was := w.down
	w.down = fmt.Errorf("%w: %v", ErrUnavailable, err)
	// Appends waiting for an fsync now fail with the outage.
	w.wakeWaitersLocked()
	w.mu.Unlock()
	if was == nil {
		w.log.Error("audit log unwritable; denying traffic until it recovers", zap.Error(err))
	}
}

func (w *Writer) setUp() {
	w.mu.Lock()
	w.down = nil
	w.mu.Unlock()
	w.log.Info("audit log writable again", zap.Uint64("seq", w.seg.seq))
}

// dirMode and fileMode keep the log readable by the egressd group only.
const (
	dirMode  os.FileMode = 0o750
	fileMode os.FileMode = 0o640
)
