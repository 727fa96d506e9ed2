package audit

import (
	"sync"
	"time"

	"go.uber.org/zap"
)

// FailLog reports failed appends to the operational log without flooding
// it: while the audit disk is full every refused request fails its append,
// and a line for each would bury the one that matters. The first failure
// is logged at once; later ones within Every are counted, and the next line
// says how many were suppressed and how many failed in all.
type FailLog struct {
	log   *zap.Logger
	every time.Duration
	now   func() time.Time

	mu         sync.Mutex
	last       time.Time // when the last line was written
	suppressed uint64    // failures since then, not logged
	total      uint64
}

// DefaultFailLogEvery is the interval between "audit append failed" lines.
const DefaultFailLogEvery = 5 * time.Second

// NewFailLog returns a FailLog writing at most one line per every to log.
// If every is zero, DefaultFailLogEvery is used.
func NewFailLog(log *zap.Logger, every time.Duration) *FailLog {
	if every <= 0 {
		every = DefaultFailLogEvery
	}
	return &FailLog{log: log, every: every, now: time.Now}
}

// Failed notes that an append failed with err; fields say for what (a
// request id, a DNS name) on the lines that are written.
func (l *FailLog) Failed(err error, fields ...zap.Field) {
	now := l.now()
	l.mu.Lock()
	l.total++
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	suppressed, total := l.suppressed, l.total
	l.last, l.suppressed = now, 0
	l.mu.Unlock()
	l.log.Error("audit append failed; refusing requests", append(fields, zap.Error(err),
		zap.Uint64("suppressed", suppressed), zap.Uint64("failed_total", total),
		zap.Duration("interval", l.every))...)
}
