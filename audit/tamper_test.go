package audit

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// buildLog writes n decision records into small segments and returns the
// directory and its segment paths.
func buildLog(t *testing.T, n int) (string, []string) {
	t.Helper()
	c := testConfig(t, "interval")
	c.MaxSegmentBytes = minSegmentBytes
	w := mustOpen(t, c)
	appendN(t, w, 0, n)
	if err := w.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	segs, err := ListSegments(c.Dir)
	if err != nil || len(segs) < 4 {
		t.Fatalf("ListSegments = %d segments, %v; want at least 4", len(segs), err)
	}
	return c.Dir, segs
}

func readLines(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.SplitAfter(b, []byte("\n"))
}

func writeLines(t *testing.T, path string, lines [][]byte) {
	t.Helper()
	if err := os.WriteFile(path, bytes.Join(lines, nil), 0o640); err != nil {
		t.Fatal(err)
	}
}

// seqAt returns the seq of line i (0-based) of path.
func seqAt(t *testing.T, path string, i int) uint64 {
	t.Helper()
	var r Record
	l := readLines(t, path)[i]
	if err := ParseRecord(bytes.TrimSuffix(l, []byte("\n")), &r); err != nil {
		t.Fatal(err)
	}
	return r.Seq
}

func TestVerifyTamper(t *testing.T) {
	tests := []struct {
		name string
		// tamper changes the log in dir and returns the file, 1-based line
		// and seq verify must name.
		tamper func(t *testing.T, segs []string) (file string, line int, seq uint64)
		expect func(segs []string) []Checkpoint
		reason string
	}{
		{
			name: "flipped byte",
			tamper: func(t *testing.T, segs []string) (string, int, uint64) {
				lines := readLines(t, segs[1])
				seq := seqAt(t, segs[1], 2)
				i := bytes.Index(lines[2], []byte("pypi.org"))
				lines[2][i] ^= 0x01
				writeLines(t, segs[1], lines)
				return segs[1], 3, seq
			},
			reason: "hash mismatch",
		},
		{
			name: "flipped byte in hash",
			tamper: func(t *testing.T, segs []string) (string, int, uint64) {
				lines := readLines(t, segs[2])
				seq := seqAt(t, segs[2], 1)
				l := lines[1]
				l[len(l)-5] ^= 0x01
				writeLines(t, segs[2], lines)
				return segs[2], 2, seq
			},
			reason: "hash mismatch",
		},
		{
			name: "deleted line",
			tamper: func(t *testing.T, segs []string) (string, int, uint64) {
				lines := readLines(t, segs[1])
				seq := seqAt(t, segs[1], 3)
				writeLines(t, segs[1], append(lines[:2:2], lines[3:]...))
				return segs[1], 3, seq
			},
			reason: "missing or moved",
		},
		{
			name: "swapped lines",
			tamper: func(t *testing.T, segs []string) (string, int, uint64) {
				lines := readLines(t, segs[1])
				seq := seqAt(t, segs[1], 3)
				lines[2], lines[3] = lines[3], lines[2]
				writeLines(t, segs[1], lines)
				return segs[1], 3, seq
			},
			reason: "missing or moved",
		},
		{
			name: "truncated mid-line",
			tamper: func(t *testing.T, segs []string) (string, int, uint64) {
				last := segs[len(segs)-1]
				lines := readLines(t, last)
				n := len(lines) - 1 // the split leaves an empty last element
				seq := seqAt(t, last, n-1)
				lines[n-1] = lines[n-1][:40]
				writeLines(t, last, lines)
				return last, n, seq
			},
			reason: "unterminated last line",
		},
		{
			name: "removed middle segment",
			tamper: func(t *testing.T, segs []string) (string, int, uint64) {
				if err := os.Remove(segs[2]); err != nil {
					t.Fatal(err)
				}
				return segs[3], 1, seqAt(t, segs[3], 0)
			},
			reason: "segment follows " + SegmentName(3) + ", which is missing",
		},
		{
			name: "first lines of a segment removed",
			tamper: func(t *testing.T, segs []string) (string, int, uint64) {
				lines := readLines(t, segs[2])
				seq := seqAt(t, segs[2], 2)
				writeLines(t, segs[2], lines[2:])
				return segs[2], 1, seq
			},
			reason: "not a segment record",
		},
		{
			name: "tail truncated at a line boundary, caught by a checkpoint",
			expect: func(segs []string) []Checkpoint {
				last := segs[len(segs)-1]
				lines := bytes.SplitAfter(must(os.ReadFile(last)), []byte("\n"))
				var r Record
				if err := ParseRecord(bytes.TrimSuffix(lines[len(lines)-2], []byte("\n")), &r); err != nil {
					panic(err)
				}
				return []Checkpoint{{Seq: r.Seq, Hash: r.Hash}}
			},
			tamper: func(t *testing.T, segs []string) (string, int, uint64) {
				last := segs[len(segs)-1]
				lines := readLines(t, last)
				n := len(lines) - 1
				seq := seqAt(t, last, n-1)
				writeLines(t, last, lines[:n-1])
				return last, 0, seq
			},
			reason: "the tail was truncated",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, segs := buildLog(t, 60)
			v := NewVerifier()
			if tt.expect != nil {
				v.Expect = tt.expect(segs)
			}
			file, line, seq := tt.tamper(t, segs)
			err := v.Paths([]string{dir})
			var be *BreakError
			if !errors.As(err, &be) {
				t.Fatalf("verify = %v; want a BreakError", err)
			}
			if filepath.Base(be.File) != filepath.Base(file) || be.Line != line || be.Seq != seq {
				t.Errorf("verify = %v; want %s:%d seq %d", be, filepath.Base(file), line, seq)
			}
			if !strings.Contains(be.Reason, tt.reason) {
				t.Errorf("verify reason = %q; want it to contain %q", be.Reason, tt.reason)
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
