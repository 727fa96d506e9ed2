package audit

import (
	"bytes"
	"strings"
	"testing"
)

// TestStreamVerifierRepeatsAcrossTheWindow: repeats are recognised both
// before and after the hash ring wraps; an older seq is refused.
func TestStreamVerifierRepeatsAcrossTheWindow(t *testing.T) {
	dir := t.TempDir()
	n := replayWindow + 100
	// The queue holds every record: a writer slowed by a loaded machine
	// must not turn this loop's appends into ErrQueueFull.
	w := mustOpen(t, Config{Dir: dir, QueueSize: n})
	for range n - 1 {
		if err := w.Append(&Record{Kind: KindDNS, Name: "example.com"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rd, err := NewReader([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var lines [][]byte
	for {
		if _, err := rd.Next(); err != nil {
			break
		}
		lines = append(lines, bytes.Clone(rd.Raw))
	}
	if len(lines) != n {
		t.Fatalf("%d lines; want %d", len(lines), n)
	}
	var v StreamVerifier
	var r Record
	feed := func(i int) error { return v.Line(lines[i], &r) }
	for i := range 50 {
		if err := feed(i); err != nil {
			t.Fatal(err)
		}
	}
	for i := 40; i < n; i++ { // a repeated batch before the wrap, then the rest
		if err := feed(i); err != nil {
			t.Fatalf("seq %d: %v", i+1, err)
		}
	}
	for i := n - 30; i < n; i++ { // a repeated batch after the wrap
		if err := feed(i); err != nil {
			t.Fatalf("repeat of seq %d: %v", i+1, err)
		}
	}
	if v.Records != n || v.Repeats != 10+30 {
		t.Errorf("records %d repeats %d; want %d and 40", v.Records, v.Repeats, n)
	}
	if err := feed(10); err == nil || !strings.Contains(err.Error(), "too far back") {
		t.Errorf("seq 11 after %d = %v; want refused as too far back", n, err)
	}
	if err := feed(n - 5); err != nil {
		t.Errorf("repeat inside the window after a refusal = %v", err)
	}
}
