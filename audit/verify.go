package audit

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"sort"
)

// BreakError names the first record where the log is not intact.
type BreakError struct {
	File   string
	Line   int   // 1-based
	Offset int64 // byte offset of the line in File
	// Seq is the record's seq when it could be read, else the seq expected
	// at that position.
	Seq    uint64
	Reason string
}

func (e *BreakError) Error() string {
	return fmt.Sprintf("%s:%d: seq %d: %s", e.File, e.Line, e.Seq, e.Reason)
}

// Checkpoint is a chain head known from outside the log (the operational
// log's "audit checkpoint" lines): the record with Seq must have Hash, and
// the log must reach it.
type Checkpoint struct {
	Seq  uint64
	Hash string
}

// Counts summarize what a Verifier read.
type Counts struct {
	Files, Records, Segments int
	// Checkpoints counts checkpoint records; Signed those whose signature
	// was checked against a public key.
	Checkpoints, Signed int
	// LastCheckpoint is the seq the last checkpoint record stated; the
	// records after it are covered only by the chain.
	LastCheckpoint uint64
	Bytes          int64
}

// Verifier checks segments in order in constant memory: each line's hash,
// the chain (prev = previous hash), seq continuity, segment links, torn
// lines noted by the next segment, and signed checkpoints.
type Verifier struct {
	// PublicKey, if set, checks checkpoint signatures; if nil their
	// contents are still checked against the chain.
	PublicKey ed25519.PublicKey
	// Expect are external checkpoints the log must match and reach.
	Expect []Checkpoint

	Counts Counts

	h   hash.Hash
	rd  *bufio.Reader
	dec decoder
	rec Record
	// prev and sum are per-line scratch kept off the stack: the digest
	// interface would make locals escape.
	prev, sum [sha256.Size]byte
	started   bool
	seq       uint64
	head      [sha256.Size]byte
	headHex   [hexLen]byte
	// prevFile is the base name of the last file read.
	prevFile string
	// torn are unterminated lines the next segment header must name; at
	// is where the first one is.
	torn   []tornRef
	tornAt BreakError
	expect int
}

// NewVerifier returns a Verifier at the start of a log.
func NewVerifier() *Verifier {
	v := &Verifier{h: sha256.New(), rd: bufio.NewReaderSize(nil, maxLine+1)}
	hex.Encode(v.headHex[:], zeroHash[:])
	return v
}

// Head is the seq and hash of the last intact record.
func (v *Verifier) Head() (uint64, string) { return v.seq, string(v.headHex[:]) }

// Paths verifies files and directories (each directory's segments in
// order) as one log.
func (v *Verifier) Paths(paths []string) error {
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		files := []string{p}
		if fi.IsDir() {
			if files, err = ListSegments(p); err != nil {
				return err
			}
			if len(files) == 0 {
				return fmt.Errorf("no audit segments (%s*%s) in %s", segPrefix, segSuffix, p)
			}
		}
		for _, f := range files {
			if err := v.File(f); err != nil {
				return err
			}
		}
	}
	return v.Finish()
}

// File verifies one segment file.
func (v *Verifier) File(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close() //nolint:errcheck // opened read-only: Close cannot lose data
	return v.Reader(path, f)
}

// Reader verifies one segment read from r; name is used in errors and
// its base name must match the next segment's link.
func (v *Verifier) Reader(name string, r io.Reader) error {
	v.rd.Reset(r)
	v.Counts.Files++
	var off int64
	for line := 1; ; line++ {
		b, err := v.rd.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return v.brk(name, line, off, 0, fmt.Sprintf("line longer than %d bytes", maxLine))
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read %s: %w", name, err)
		}
		if len(b) == 0 {
			break
		}
		v.Counts.Bytes += int64(len(b))
		if b[len(b)-1] != '\n' {
			if len(v.torn) == 0 {
				v.tornAt = BreakError{File: name, Line: line, Offset: off, Seq: v.seq + 1,
					Reason: fmt.Sprintf("unterminated last line at byte %d (torn by a crash, or the file was truncated)", off)}
			}
			v.torn = append(v.torn, tornRef{filepath.Base(name), off})
			break
		}
		if err := v.line(name, line, off, b[:len(b)-1]); err != nil {
			return err
		}
		off += int64(len(b))
	}
	v.prevFile = filepath.Base(name)
	return nil
}

func (v *Verifier) brk(file string, line int, off int64, seq uint64, reason string) error {
	if seq == 0 {
		seq = v.seq + 1
	}
	return &BreakError{File: file, Line: line, Offset: off, Seq: seq, Reason: reason}
}

func (v *Verifier) line(name string, n int, off int64, b []byte) error {
	body, prevHex, hashHex, err := splitLine(b)
	if err != nil {
		return v.brk(name, n, off, 0, "malformed line: "+err.Error())
	}
	prev, sum := &v.prev, &v.sum
	// The common case links to the head; decode only what does not.
	if bytes.Equal(prevHex, v.headHex[:]) {
		*prev = v.head
	} else if !decodeHex(prev, prevHex) {
		return v.brk(name, n, off, 0, "malformed prev field")
	}
	lineSum(v.h, prev, body, sum)
	var sumHex [hexLen]byte
	hex.Encode(sumHex[:], sum[:])
	if !bytes.Equal(sumHex[:], hashHex) {
		return v.brk(name, n, off, 0, "hash mismatch: the record was altered")
	}
	r := &v.rec
	if err := v.dec.parseLite(b, r); err != nil {
		return v.brk(name, n, off, 0, "malformed record: "+err.Error())
	}
	if err := v.position(r, n, prevHex); err != nil {
		if be := (*BreakError)(nil); errors.As(err, &be) {
			return be
		}
		return v.brk(name, n, off, r.Seq, err.Error())
	}
	if r.Kind == KindCheckpoint {
		if err := checkCheckpoint(v.PublicKey, r, v.seq, string(v.headHex[:])); err != nil {
			return v.brk(name, n, off, r.Seq, err.Error())
		}
		v.Counts.Checkpoints++
		v.Counts.LastCheckpoint = v.seq
		if v.PublicKey != nil {
			v.Counts.Signed++
		}
	}
	v.seq, v.head = r.Seq, *sum
	v.headHex = sumHex
	v.Counts.Records++
	if r.Kind == KindSegment {
		v.Counts.Segments++
	}
	// Checkpoints before the first record read are outside the files given.
	for v.expect < len(v.Expect) && v.Expect[v.expect].Seq <= r.Seq {
		c := v.Expect[v.expect]
		if c.Seq == r.Seq && c.Hash != string(sumHex[:]) {
			return v.brk(name, n, off, r.Seq, fmt.Sprintf("hash %s differs from checkpoint %s: the log was rewritten", sumHex, c.Hash))
		}
		v.expect++
	}
	v.started = true
	return nil
}

// position checks where r sits: segment headers open files and name torn
// lines; every record continues seq and the hash chain.
func (v *Verifier) position(r *Record, line int, prevHex []byte) error {
	if line == 1 && r.Kind != KindSegment {
		return fmt.Errorf("first record of the file is %q, not a segment record (lines before it missing?)", r.Kind)
	}
	if line > 1 && r.Kind == KindSegment {
		return errors.New("segment record in the middle of a file")
	}
	// A segment's torn notes are checked once the verifier has seen what
	// came before it; the first file read may follow files not given.
	if r.Kind == KindSegment && (v.started || len(v.torn) > 0) {
		if got, want := r.Detail["torn"], formatTorn(v.torn); got != want {
			if len(v.torn) > 0 {
				e := v.tornAt
				e.Reason += "; the next segment does not note it"
				return &e
			}
			return fmt.Errorf("segment notes torn lines %q that are not there", got)
		}
		v.torn = v.torn[:0]
	}
	if !v.started {
		return nil
	}
	if r.Kind == KindSegment && r.Detail["previous"] != v.prevFile && (r.Seq != v.seq+1 || !bytes.Equal(prevHex, v.headHex[:])) {
		return fmt.Errorf("segment follows %s, which is missing (the file before it is %s, ending at seq %d)",
			r.Detail["previous"], v.prevFile, v.seq)
	}
	switch want := v.seq + 1; {
	case r.Seq > want:
		return fmt.Errorf("seq jumps from %d: records %d..%d are missing or moved", v.seq, want, r.Seq-1)
	case r.Seq < want:
		return fmt.Errorf("seq %d after %d: record out of order or repeated", r.Seq, v.seq)
	}
	if !bytes.Equal(prevHex, v.headHex[:]) {
		return fmt.Errorf("prev does not match the hash of seq %d: a record was altered, removed or reordered", v.seq)
	}
	return nil
}

// Finish reports a torn line no segment noted, and external checkpoints
// the log never reached (a truncated tail).
func (v *Verifier) Finish() error {
	if len(v.torn) > 0 {
		e := v.tornAt
		return &e
	}
	if v.expect < len(v.Expect) {
		c := v.Expect[len(v.Expect)-1]
		return &BreakError{File: v.prevFile, Seq: v.seq + 1,
			Reason: fmt.Sprintf("log ends at seq %d before checkpoint seq %d: the tail was truncated", v.seq, c.Seq)}
	}
	return nil
}

// SortCheckpoints orders Expect by seq; Verifier needs them sorted.
func SortCheckpoints(c []Checkpoint) {
	sort.Slice(c, func(i, j int) bool { return c[i].Seq < c[j].Seq })
}
