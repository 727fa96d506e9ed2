package audit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.uber.org/zap"
)

// recover finds the chain head at start. It verifies the newest segment
// and the one before it (so the link between them is checked too) — at
// most two segments of MaxSegmentBytes, read once. Then:
//   - a clean newest segment is appended to;
//   - an empty newest segment (created, header never written) is reused;
//   - a torn last line is left as it is and a new segment names it;
//   - a broken chain stops Open unless AcceptBreak, which starts a new
//     segment and records the acceptance.
func (w *Writer) recover() error {
	s := &w.seg
	if err := os.MkdirAll(s.dir, dirMode); err != nil {
		return fmt.Errorf("audit dir: %w", err)
	}
	paths, err := ListSegments(s.dir)
	if err != nil {
		return fmt.Errorf("audit dir: %w", err)
	}
	if len(paths) == 0 {
		return w.startSegment("start", nil)
	}
	last := paths[len(paths)-1]
	s.num, _ = parseSegmentName(filepath.Base(last))
	s.name = filepath.Base(last)
	if len(paths) > 1 {
		s.prevName = filepath.Base(paths[len(paths)-2])
	}

	v := NewVerifier()
	var brk *BreakError
	tail := paths[max(0, len(paths)-2):]
	if len(tail) == 2 && startsAfterBreak(last) {
		tail = tail[1:]
	}
	for _, p := range tail {
		if err := v.File(p); err != nil {
			if !errors.As(err, &brk) {
				return fmt.Errorf("read audit log: %w", err)
			}
			break
		}
	}
	s.seq, s.head = v.seq, v.head
	h := v.head
	s.st.seq.Store(v.seq)
	s.st.head.Store(&h)

	if brk != nil {
		if !w.cfg.AcceptBreak {
			return fmt.Errorf("audit chain broken at %w; start with --audit-accept-break to continue "+
				"in a new segment (the break stays in the log and verify still reports it)", brk)
		}
		w.log.Warn("audit chain broken; continuing as --audit-accept-break asks", zap.Error(brk))
		note := Record{TS: time.Now(), Kind: KindAcceptedBreak, Detail: map[string]string{
			"file": filepath.Base(brk.File), "line": strconv.Itoa(brk.Line),
			"seq": strconv.FormatUint(brk.Seq, 10), "error": brk.Reason,
		}}
		return w.startSegment("accepted_break", &note)
	}

	s.tornRefs = append(s.tornRefs[:0], v.torn...)
	fi, err := os.Stat(last)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	reason := "start"
	if len(s.tornRefs) > 0 {
		reason = "recovered_torn_tail"
		w.log.Warn("audit log has a torn last line; leaving it and starting a new segment",
			zap.String("torn", formatTorn(s.tornRefs)))
	}
	switch {
	case fi.Size() == 0:
		// Reuse it: the header write failed or never ran.
		if err := s.reopen(last); err != nil {
			return err
		}
		s.needHeader, s.headerReason = true, reason
		return w.startSegment(reason, nil)
	case len(s.tornRefs) > 0:
		return w.startSegment(reason, nil)
	}
	if err := s.reopen(last); err != nil {
		return err
	}
	s.size = fi.Size()
	if s.size >= s.max {
		s.rotate = "rotate"
	}
	return nil
}

// reopen opens an existing segment to append to it.
func (s *segState) reopen(path string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	s.f = wrapSegment(f)
	return nil
}

// startsAfterBreak reports whether the segment at path was started past a
// broken chain the operator accepted; the segment before it is then not
// checked again.
func startsAfterBreak(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close() //nolint:errcheck // opened read-only: Close cannot lose data
	b, err := bufio.NewReaderSize(f, 4096).ReadSlice('\n')
	if err != nil {
		return false
	}
	var r Record
	if ParseRecord(bytes.TrimSuffix(b, []byte{'\n'}), &r) != nil {
		return false
	}
	return r.Kind == KindSegment && r.Detail["reason"] == "accepted_break"
}

// startSegment writes a segment header (and note, if any) at Open and
// fsyncs it, so a start-up that cannot write fails loudly.
func (w *Writer) startSegment(reason string, note *Record) error {
	s := &w.seg
	if err := s.openSegment(reason); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	if note != nil {
		if _, err := s.write([]*Record{note}); err != nil {
			return fmt.Errorf("audit log: %w", err)
		}
	}
	if err := s.sync(); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	return nil
}

// writeStarted writes and fsyncs the started record at Open, before the
// writer goroutine takes the segment over.
func (w *Writer) writeStarted(detail map[string]string) error {
	rec := Record{TS: time.Now(), Kind: KindStarted, Detail: detail}
	w.prepare(&rec)
	if _, err := w.seg.write([]*Record{&rec}); err != nil {
		return fmt.Errorf("audit log: started record: %w", err)
	}
	if err := w.seg.sync(); err != nil {
		return fmt.Errorf("audit log: started record: %w", err)
	}
	return nil
}
