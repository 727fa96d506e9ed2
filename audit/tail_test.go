package audit

import (
	"errors"
	"testing"
)

// TestTailResumesAcrossRotation: a Tail from a Position taken anywhere
// returns exactly the records after it, across segment rotations, then
// ErrNoRecord; records appended later follow.
func TestTailResumesAcrossRotation(t *testing.T) {
	dir := t.TempDir()
	w := mustOpen(t, Config{Dir: dir, Sync: "always", MaxSegmentBytes: minSegmentBytes})
	defer w.Close()
	appendHTTP := func(n int) {
		for range n {
			if err := w.Append(&Record{Kind: KindHTTP, Identity: "sb", Host: "example.com", Path: "/a-path-long-enough-to-rotate-soon"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendHTTP(100)
	if segs, _ := ListSegments(dir); len(segs) < 3 {
		t.Fatalf("%d segments; want rotations", len(segs))
	}
	// Positions after every record, from one pass.
	rd, err := Tail(dir, Position{})
	if err != nil {
		t.Fatal(err)
	}
	var pos []Position
	var seqs []uint64
	for {
		r, err := rd.Next()
		if errors.Is(err, ErrNoRecord) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		pos, seqs = append(pos, rd.Position()), append(seqs, r.Seq)
	}
	rd.Close()
	head, _ := w.Head()
	if len(seqs) != int(head) {
		t.Fatalf("tail read %d records; want %d", len(seqs), head)
	}
	for _, i := range []int{0, 1, len(pos) / 3, len(pos) / 2, len(pos) - 2, len(pos) - 1} {
		rd, err := Tail(dir, pos[i])
		if err != nil {
			t.Fatal(err)
		}
		want := seqs[i] + 1
		for {
			r, err := rd.Next()
			if errors.Is(err, ErrNoRecord) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Seq != want {
				t.Fatalf("Tail(%+v) gave seq %d; want %d", pos[i], r.Seq, want)
			}
			want++
		}
		if want != head+1 {
			t.Errorf("Tail(%+v) ended before seq %d, at %d", pos[i], head, want-1)
		}
		appendHTTP(1)
		head++
		if r, err := rd.Next(); err != nil || r.Seq != head {
			t.Errorf("after an append, Next = %v, %v; want seq %d", r, err, head)
		}
		rd.Close()
	}
	if _, err := Tail(dir, Position{Segment: "audit-999999.jsonl"}); err == nil {
		t.Error("Tail from a segment that is not there = nil error")
	}
}
