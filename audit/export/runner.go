package export

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/atomicfile"
)

// closeTimeout bounds a sink's flush at shutdown.
const closeTimeout = 5 * time.Second

// Cursor is what a sink has delivered, persisted after every batch.
type Cursor struct {
	// Pos is just after the last delivered record.
	Pos audit.Position `json:"position"`
	// Seq and Hash are the last delivered record's.
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
	// Chain is the hash of the log's first record: the chain's id.
	Chain string `json:"chain"`
}

// CursorPath is where the cursor of the sink named name is kept.
func CursorPath(dir, name string) string {
	return filepath.Join(dir, "export-"+name+".cursor")
}

func loadCursor(path string) (Cursor, error) {
	var c Cursor
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("read export cursor: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("export cursor %s: %w (delete it to export the whole log again)", path, err)
	}
	return c, nil
}

// runner moves one sink along the log.
type runner struct {
	cfg     audit.ExportConfig
	dir     string
	sink    Sink
	log     *zap.Logger
	path    string
	cur     Cursor
	replica string

	// seq is the last delivered seq; exported and failures count for the
	// metrics, lastOK is the Unix time of the last delivery.
	seq      atomic.Uint64
	exported atomic.Uint64
	failures atomic.Uint64
	lastOK   atomic.Int64
}

func newRunner(cfg audit.ExportConfig, dir string, s Sink, log *zap.Logger) (*runner, error) {
	r := &runner{cfg: cfg, dir: dir, sink: s, log: log, path: CursorPath(dir, s.Name()), replica: cfg.Replica}
	c, err := loadCursor(r.path)
	if err != nil {
		return nil, err
	}
	r.cur = c
	r.seq.Store(c.Seq)
	return r, nil
}

// run exports until ctx ends. A read error (the log unreadable) is logged
// and retried from the cursor after a backoff, like a failed delivery.
func (r *runner) run(ctx context.Context) {
	back := r.cfg.Poll
	for ctx.Err() == nil {
		err := r.follow(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		r.failures.Add(1)
		r.log.Warn("audit export stopped; retrying from its cursor", zap.Error(err), zap.Duration("in", back))
		if !sleep(ctx, back) {
			return
		}
		back = min(2*back, r.cfg.MaxBackoff)
	}
}

// follow reads from the cursor and delivers batches until ctx ends.
func (r *runner) follow(ctx context.Context) error {
	rd, err := audit.Tail(r.dir, r.cur.Pos)
	if err != nil {
		return err
	}
	defer rd.Close() //nolint:errcheck // opened read-only: Close cannot lose data
	batch := make([]Event, 0, r.cfg.BatchSize)
	var pos audit.Position
	for ctx.Err() == nil {
		rec, err := rd.Next()
		if errors.Is(err, audit.ErrNoRecord) {
			if len(batch) > 0 {
				if !r.deliver(ctx, batch, pos) {
					return nil
				}
				batch = batch[:0]
				continue
			}
			if !sleep(ctx, r.cfg.Poll) {
				return nil
			}
			continue
		}
		if err != nil {
			return err
		}
		if r.cur.Chain == "" {
			// The log's first record names the chain.
			r.cur.Chain = rec.Hash
		}
		batch = append(batch, Event{Line: bytes.Clone(rd.Raw), Rec: *rec, Replica: r.replica, Chain: r.cur.Chain})
		pos = rd.Position()
		if len(batch) == cap(batch) {
			if !r.deliver(ctx, batch, pos) {
				return nil
			}
			batch = batch[:0]
		}
	}
	return nil
}

// deliver exports batch until it succeeds, then persists the cursor at
// pos; it reports false if ctx ended first (the batch is sent again by
// the next start: at-least-once).
func (r *runner) deliver(ctx context.Context, batch []Event, pos audit.Position) bool {
	back := r.cfg.Poll
	for {
		err := r.sink.Export(ctx, batch)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return false
		}
		r.failures.Add(1)
		r.log.Warn("audit export failed; retrying", zap.Error(err),
			zap.Uint64("from_seq", batch[0].Rec.Seq), zap.Int("records", len(batch)), zap.Duration("in", back))
		if !sleep(ctx, back) {
			return false
		}
		back = min(2*back, r.cfg.MaxBackoff)
	}
	last := batch[len(batch)-1].Rec
	r.cur.Pos, r.cur.Seq, r.cur.Hash = pos, last.Seq, last.Hash
	b, err := json.Marshal(r.cur)
	if err == nil {
		err = atomicfile.Write(r.path, append(b, '\n'), 0o600)
	}
	if err != nil {
		// Delivered but not remembered: a restart repeats these records,
		// which at-least-once allows.
		r.log.Warn("audit export cursor not saved", zap.Error(err))
	}
	r.seq.Store(last.Seq)
	r.exported.Add(uint64(len(batch)))
	r.lastOK.Store(time.Now().Unix())
	return true
}

// sleep waits d or until ctx ends, reporting whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
