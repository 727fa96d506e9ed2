package audit

import (
	"os"
	"strings"
	"testing"
)

// readmeStarts is what README says of the records a start writes; the
// test below checks egressd does exactly that. (README said every start
// writes a segment record, which a restart after a clean stop, or a crash
// that left a whole last line, does not.)
const readmeStarts = "The first start writes a `segment` record (a new segment; so does a start\n" +
	"after a crash left a torn line, see [After a crash](#after-a-crash)); a\n" +
	"later start appends to the newest segment if its last line is whole. Every\n" +
	"start writes a `started` record"

// TestStartRecordsAsReadmeSays: a first start writes a segment record and
// a started record; a restart on a whole last line appends a started
// record to the same segment; a restart after a torn line begins a segment.
func TestStartRecordsAsReadmeSays(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), readmeStarts) {
		t.Errorf("README.md does not say what a start writes as this test checks it:\n%s", readmeStarts)
	}
	c := testConfig(t, "always")
	c.Started = map[string]string{"pid": "1"}
	start := func() []Kind {
		t.Helper()
		w := mustOpen(t, c)
		appendN(t, w, 0, 1)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		var kinds []Kind
		for _, r := range readRecords(t, c.Dir) {
			kinds = append(kinds, r.Kind)
		}
		return kinds
	}
	want := func(what string, got []Kind, segs int, tail ...Kind) {
		t.Helper()
		paths, _ := ListSegments(c.Dir)
		ok := len(paths) == segs && len(got) >= len(tail)
		for i := range tail {
			ok = ok && got[len(got)-len(tail)+i] == tail[i]
		}
		if !ok {
			t.Errorf("%s: %d segments, records %v; want %d segments, ending %v", what, len(paths), got, segs, tail)
		}
	}
	want("first start", start(), 1, KindSegment, KindStarted, "http")
	want("restart on a whole last line", start(), 1, "http", KindStarted, "http")
	paths, _ := ListSegments(c.Dir)
	f, err := os.OpenFile(paths[0], os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"seq":9,"kind":"ht`)
	f.Close()
	want("restart after a torn line", start(), 2, KindSegment, KindStarted, "http")
}
