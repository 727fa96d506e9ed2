package audit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Reader reads records from segment files in order. It does not check
// hashes (Verifier does); it skips a torn last line.
type Reader struct {
	paths []string
	dir   string // followed directory, "" when not following
	idx   int
	f     *os.File
	rd    *bufio.Reader
	off   int64 // offset of the next line in f
	// final is set once a newer segment exists: the open one will not grow.
	final bool
	rec   Record
	// seek is the offset to start the first file opened at (Tail).
	seek int64

	// File and Line locate the record Next last returned; Raw is its line
	// as written (without the newline), valid until the next call.
	File string
	Line int
	Raw  []byte
}

// ErrNoRecord means a followed log (Follow, Tail) has no complete record
// yet.
var ErrNoRecord = errors.New("no new record yet")

// NewReader reads the files and directories (their segments, in order) of
// paths.
func NewReader(paths []string) (*Reader, error) {
	r := &Reader{rd: bufio.NewReaderSize(nil, maxLine+1)}
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			r.paths = append(r.paths, p)
			continue
		}
		segs, err := ListSegments(p)
		if err != nil {
			return nil, err
		}
		r.paths = append(r.paths, segs...)
	}
	return r, nil
}

// Close closes the open file.
func (r *Reader) Close() error {
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}

// Next returns the next record, valid until the following call, or io.EOF.
func (r *Reader) Next() (*Record, error) {
	for {
		if r.f == nil {
			if r.idx >= len(r.paths) {
				if r.dir != "" {
					// Nothing to read yet, or a rotation the last
					// file's end did not reveal: look for segments.
					if r.refresh() {
						continue
					}
					return nil, ErrNoRecord
				}
				return nil, io.EOF
			}
			f, err := os.Open(r.paths[r.idx])
			if err != nil {
				return nil, err
			}
			r.f, r.off, r.final, r.Line = f, 0, false, 0
			r.File = r.paths[r.idx]
			if r.seek > 0 {
				if _, err := f.Seek(r.seek, io.SeekStart); err != nil {
					return nil, fmt.Errorf("seek %s: %w", r.File, err)
				}
				r.off, r.seek = r.seek, 0
			}
			r.rd.Reset(f)
		}
		b, err := r.rd.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%s:%d: line longer than %d bytes", r.File, r.Line+1, maxLine)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("read %s: %w", r.File, err)
		}
		if n := len(b); n > 0 && b[n-1] == '\n' {
			r.off += int64(n)
			r.Line++
			r.Raw = b[:n-1]
			if err := ParseRecord(b[:n-1], &r.rec); err != nil {
				return nil, fmt.Errorf("%s:%d: %w", r.File, r.Line, err)
			}
			return &r.rec, nil
		}
		if r.dir != "" && r.idx == len(r.paths)-1 && !r.final {
			// The newest segment may still be written: rewind over a
			// partial line and wait, unless a newer segment appeared.
			if !r.refresh() {
				if err := r.rewind(); err != nil {
					return nil, err
				}
				return nil, ErrNoRecord
			}
			r.final = true
			if err := r.rewind(); err != nil {
				return nil, err
			}
			continue
		}
		r.Close()
		r.idx++
	}
}

func (r *Reader) rewind() error {
	if _, err := r.f.Seek(r.off, io.SeekStart); err != nil {
		return fmt.Errorf("seek %s: %w", r.File, err)
	}
	r.rd.Reset(r.f)
	return nil
}

// refresh adds segments newer than the last known one and reports whether
// there were any.
func (r *Reader) refresh() bool {
	segs, err := ListSegments(r.dir)
	if err != nil {
		return false
	}
	last := ""
	if len(r.paths) > 0 {
		last = filepath.Base(r.paths[len(r.paths)-1])
	}
	lastNum, _ := parseSegmentName(last)
	added := false
	for _, s := range segs {
		if n, _ := parseSegmentName(filepath.Base(s)); n > lastNum {
			r.paths = append(r.paths, s)
			added = true
		}
	}
	return added
}

// Position is where a Tail stands: a segment's base name and the byte
// offset just after the last record read from it. The zero Position is
// the start of the log.
type Position struct {
	Segment string `json:"segment"`
	Offset  int64  `json:"offset"`
}

// Tail returns a Reader of dir's records after pos that follows the log
// as it grows and rotates: its Next returns ErrNoRecord while no further
// complete record exists. It never writes and takes no lock the Writer
// takes, so reading behind the writer cannot slow an Append.
func Tail(dir string, pos Position) (*Reader, error) {
	r, err := NewReader([]string{dir})
	if err != nil {
		return nil, err
	}
	r.dir = dir
	if pos.Segment == "" {
		return r, nil
	}
	for i, p := range r.paths {
		if filepath.Base(p) == pos.Segment {
			r.idx, r.seek = i, pos.Offset
			return r, nil
		}
	}
	return nil, fmt.Errorf("segment %s is not in %s: the log the position was taken from is gone", pos.Segment, dir)
}

// Position is the position after the record Next last returned.
func (r *Reader) Position() Position {
	return Position{Segment: filepath.Base(r.File), Offset: r.off}
}

// Follow reads dir's segments from the first and then waits for new
// records, across rotations, until ctx ends (returning nil) or fn fails.
// fn gets each record and its line as written.
func Follow(ctx context.Context, dir string, poll time.Duration, fn func(r *Record, raw []byte) error) error {
	r, err := Tail(dir, Position{})
	if err != nil {
		return err
	}
	defer r.Close()
	t := time.NewTimer(poll)
	defer t.Stop()
	for {
		rec, err := r.Next()
		switch {
		case errors.Is(err, ErrNoRecord):
			t.Reset(poll)
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			continue
		case err != nil:
			return err
		}
		if err := fn(rec, r.Raw); err != nil {
			return err
		}
	}
}
