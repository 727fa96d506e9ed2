package audit

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

const (
	segPrefix = "audit-"
	segSuffix = ".jsonl"
)

// SegmentName is the file name of segment n: audit-000001.jsonl, ….
func SegmentName(n int) string {
	return fmt.Sprintf("%s%06d%s", segPrefix, n, segSuffix)
}

// parseSegmentName returns n for a name SegmentName(n) produced.
func parseSegmentName(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, segPrefix)
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, segSuffix)
	if !ok || len(s) < 6 {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || SegmentName(n) != name {
		return 0, false
	}
	return n, true
}

// ListSegments returns the segment files in dir in order, as paths.
func ListSegments(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	type seg struct {
		n    int
		name string
	}
	var segs []seg
	for _, e := range ents {
		if n, ok := parseSegmentName(e.Name()); ok && e.Type().IsRegular() {
			segs = append(segs, seg{n, e.Name()})
		}
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].n < segs[j].n })
	paths := make([]string, len(segs))
	for i, s := range segs {
		paths[i] = filepath.Join(dir, s.name)
	}
	return paths, nil
}

// segFile is what the writer needs of an open segment.
type segFile interface {
	io.Writer
	Sync() error
	Close() error
}

// wrapSegment lets tests put a fault-injecting layer between the writer
// and its files; egressd itself uses the *os.File as it is.
var wrapSegment = func(f *os.File) segFile { return f }

// tornRef names an unterminated line left in a segment.
type tornRef struct {
	file   string
	offset int64
}

func formatTorn(refs []tornRef) string {
	parts := make([]string, len(refs))
	for i, t := range refs {
		parts[i] = t.file + "@" + strconv.FormatInt(t.offset, 10)
	}
	return strings.Join(parts, " ")
}

// maxWrite bounds one write call, so the buffer stays small and a large
// batch reaches the file in steps.
const maxWrite = 256 << 10

// lineMark is where an encoded line ends in the write buffer and the chain
// state after it.
type lineMark struct {
	end  int
	seq  uint64
	hash [sha256.Size]byte
}

// segState is the open segment and the chain head. It is owned by one
// goroutine: Open's, then the writer's.
type segState struct {
	dir string
	max int64
	st  *stats
	enc *encoder

	f        segFile
	num      int    // number of the open (or last) segment; 0 before the first
	name     string // its file name
	prevName string // the segment before it, "" for the first
	size     int64
	// torn is the offset of an unterminated line at the end of f, -1 if
	// none; f is never written again once it is torn.
	torn int64
	// tornRefs are torn lines the next segment header must name.
	tornRefs []tornRef
	// needHeader is set while f has no segment record yet.
	needHeader   bool
	headerReason string
	// rotate, when set, is the reason the next write starts a new segment.
	rotate string
	dirty  bool // written since the last fsync

	seq  uint64
	head [sha256.Size]byte

	buf      []byte
	marks    []lineMark
	closeErr error
}

func (s *segState) init(cfg Config, st *stats) {
	s.dir = cfg.Dir
	s.max = cfg.MaxSegmentBytes
	s.st = st
	s.enc = newEncoder()
	s.torn = -1
}

func (s *segState) headHex() string { return fmt.Sprintf("%x", s.head[:]) }

// write appends recs in order, starting segments as needed, and returns how
// many were written completely. Nothing is fsynced here.
func (s *segState) write(recs []*Record) (int, error) {
	done := 0
	for done < len(recs) {
		if err := s.ensureSegment(); err != nil {
			return done, err
		}
		s.buf, s.marks = s.buf[:0], s.marks[:0]
		seq, head := s.seq, s.head
		for j := done; j < len(recs); j++ {
			if len(s.marks) > 0 && (s.size+int64(len(s.buf)) >= s.max || len(s.buf) >= maxWrite) {
				break
			}
			s.buf, head = s.enc.appendLine(s.buf, recs[j], seq+1, &head)
			seq++
			s.marks = append(s.marks, lineMark{end: len(s.buf), seq: seq, hash: head})
		}
		k, err := s.commit()
		done += k
		if err != nil {
			return done, err
		}
		if s.size >= s.max {
			s.rotate = "rotate"
		}
	}
	return done, nil
}

// ensureSegment opens a new segment when there is none, the current one is
// torn or full, or its header is not written yet.
func (s *segState) ensureSegment() error {
	switch {
	case s.f == nil && s.num == 0:
		return s.openSegment("start")
	case s.f == nil:
		return s.openSegment(s.headerReason)
	case s.torn >= 0:
		return s.openSegment("recovered_torn_tail")
	case s.rotate != "":
		return s.openSegment(s.rotate)
	case s.needHeader:
		return s.openSegment(s.headerReason)
	}
	return nil
}

// openSegment creates the next segment and writes its header: a segment
// record linking the previous segment by name (its last hash is the
// record's prev) and naming any torn lines left behind. An empty segment
// whose header failed to write is reused rather than left behind.
func (s *segState) openSegment(reason string) error {
	if !(s.f != nil && s.needHeader && s.size == 0 && s.torn < 0) {
		if s.f != nil {
			if s.torn >= 0 {
				s.tornRefs = append(s.tornRefs, tornRef{s.name, s.torn})
			}
			if err := s.sync(); err != nil {
				return err
			}
			f := s.f
			s.f = nil
			if err := f.Close(); err != nil {
				return fmt.Errorf("close %s: %w", s.name, err)
			}
		}
		if s.name != "" {
			s.prevName = s.name
		}
		s.headerReason = reason
		num := s.num + 1
		name := SegmentName(num)
		f, err := os.OpenFile(filepath.Join(s.dir, name), os.O_APPEND|os.O_CREATE|os.O_EXCL|os.O_WRONLY, fileMode)
		if err != nil {
			return fmt.Errorf("create segment: %w", err)
		}
		s.f, s.num, s.name, s.size, s.torn = wrapSegment(f), num, name, 0, -1
		s.needHeader, s.rotate = true, ""
		s.st.segments.Add(1)
		if err := syncDir(s.dir); err != nil {
			return err
		}
	}
	detail := map[string]string{"reason": s.headerReason}
	if s.prevName != "" {
		detail["previous"] = s.prevName
	}
	if len(s.tornRefs) > 0 {
		detail["torn"] = formatTorn(s.tornRefs)
	}
	hdr := Record{TS: time.Now(), Kind: KindSegment, Detail: detail}
	s.buf, s.marks = s.buf[:0], s.marks[:0]
	var h [sha256.Size]byte
	s.buf, h = s.enc.appendLine(s.buf, &hdr, s.seq+1, &s.head)
	s.marks = append(s.marks, lineMark{end: len(s.buf), seq: s.seq + 1, hash: h})
	k, err := s.commit()
	if k == 1 {
		s.needHeader, s.tornRefs = false, nil
	}
	return err
}

// commit writes s.buf and advances the chain over the lines that reached
// the file completely. A partial line marks the segment torn.
func (s *segState) commit() (int, error) {
	n, err := s.f.Write(s.buf)
	if err == nil && n < len(s.buf) {
		err = io.ErrShortWrite
	}
	k, end := 0, 0
	for k < len(s.marks) && s.marks[k].end <= n {
		end = s.marks[k].end
		k++
	}
	if k > 0 {
		m := s.marks[k-1]
		s.seq, s.head = m.seq, m.hash
		s.st.seq.Store(m.seq)
		h := m.hash
		s.st.head.Store(&h)
		s.st.written.Add(uint64(k))
	}
	if n > end {
		s.torn = s.size + int64(end)
	}
	if n > 0 {
		s.dirty = true
		s.st.bytes.Add(uint64(n))
	}
	s.size += int64(n)
	if err != nil {
		s.st.writeErrors.Add(1)
		return k, fmt.Errorf("write %s: %w", s.name, err)
	}
	return k, nil
}

// sync fsyncs the open segment if it has unsynced bytes. After a failed
// fsync the page cache state is unknown, so the next write starts a fresh
// segment rather than trusting this file again.
func (s *segState) sync() error {
	if s.f == nil || !s.dirty {
		return nil
	}
	s.st.syncs.Add(1)
	if err := s.f.Sync(); err != nil {
		s.st.syncErrors.Add(1)
		s.rotate = "sync_error"
		s.dirty = false
		return fmt.Errorf("fsync %s: %w", s.name, err)
	}
	s.dirty = false
	return nil
}

func (s *segState) close() {
	if s.f == nil {
		return
	}
	err := s.sync()
	if cerr := s.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", s.name, cerr)
	}
	s.f = nil
	if err != nil && s.closeErr == nil {
		s.closeErr = err
	}
}

// syncDir makes a new segment's directory entry durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir: %w", err)
	}
	defer d.Close() //nolint:errcheck // a directory opened to fsync; Sync's error is the one that counts
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("fsync dir: %w", err)
	}
	return nil
}
