package export

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/testwait"
)

// writeLog appends n decision records of every mapped kind to a new log
// in dir and returns the writer (closed by the test's cleanup).
func writeLog(t testing.TB, dir string, n int) *audit.Writer {
	t.Helper()
	w, err := audit.Open(audit.Config{Dir: dir, Sync: "always"}, zap.NewNop())
	if err != nil {
		t.Fatalf("audit.Open(%s) = %v", dir, err)
	}
	t.Cleanup(func() { w.Close() }) //nolint:errcheck // test cleanup
	appendN(t, w, n)
	return w
}

func appendN(t testing.TB, w *audit.Writer, n int) {
	t.Helper()
	for i := range n {
		if err := w.Append(sample(i)); err != nil {
			t.Fatalf("Append = %v", err)
		}
	}
}

// sample is the i-th of a cycle of records covering every OCSF class.
func sample(i int) *audit.Record {
	switch i % 4 {
	case 0:
		return &audit.Record{Kind: audit.KindHTTP, Identity: "sbx-1", Client: "10.0.0.7:41000", Method: "GET", Scheme: "https",
			Host: "api.github.com", Port: 443, Path: fmt.Sprintf("/repos/%d", i), Decision: audit.DecisionAllow, Reason: "allowed",
			Rule: "github-read", Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	case 1:
		return &audit.Record{Kind: audit.KindConnect, Identity: "sbx-2", Client: "10.0.0.8:41001", Host: "evil.example",
			Port: 443, Decision: audit.DecisionDeny, Reason: "no_rule"}
	case 2:
		return &audit.Record{Kind: audit.KindDNS, Identity: "sbx-1", Client: "10.0.0.7", Name: "pypi.org", QType: "A",
			Decision: audit.DecisionAllow, Reason: "allowed", Rule: "pypi"}
	}
	return &audit.Record{Kind: audit.KindSQL, Identity: "sbx-3", Database: "app", SQL: "SELECT * FROM t WHERE id = $1",
		Decision: audit.DecisionDeny, Reason: "sql_write"}
}

// runExporter runs sinks over dir until the returned stop is called.
func runExporter(t testing.TB, dir string, cfg audit.ExportConfig, sinks ...Sink) (*Exporter, func()) {
	t.Helper()
	e, err := New(Options{Config: cfg, Dir: dir}, sinks...)
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	return e, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}
}

func waitExported(t testing.TB, e *Exporter, sink string, seq uint64) {
	t.Helper()
	testwait.For(t, sink+" export", 20*time.Second, func() error {
		if got := e.Exported()[sink]; got < seq {
			return fmt.Errorf("exported up to seq %d, want %d", got, seq)
		}
		return nil
	})
}

func verifyOCSF(t testing.TB, b []byte) *Verifier {
	t.Helper()
	v := NewVerifier()
	if err := ReadOCSF(bytes.NewReader(b), v); err != nil {
		t.Fatalf("ReadOCSF = %v", err)
	}
	return v
}

var fastCfg = audit.ExportConfig{Replica: "r1", BatchSize: 7, Poll: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}

func TestOCSFExportVerifiesAndResumes(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(t.TempDir(), "ocsf.jsonl")
	w := writeLog(t, dir, 40)
	sink, err := NewOCSFFile(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	e, stop := runExporter(t, dir, fastCfg, sink)
	head, _ := w.Head()
	waitExported(t, e, "ocsf", head)
	stop()

	// A restart resumes at the cursor: only new records follow.
	appendN(t, w, 9)
	sink2, err := NewOCSFFile(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	e2, stop2 := runExporter(t, dir, fastCfg, sink2)
	head, _ = w.Head()
	waitExported(t, e2, "ocsf", head)
	stop2()

	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	v := verifyOCSF(t, b)
	reps := v.Reports()
	if !v.Ok() || len(reps) != 1 {
		t.Fatalf("reports = %+v; want one intact chain", reps)
	}
	if r := reps[0]; r.Records != int(head) || r.Repeats != 0 || r.Head != head || r.Replica != "r1" {
		t.Errorf("report = %+v; want %d records, no repeats, replica r1", r, head)
	}
	if n := bytes.Count(b, []byte{'\n'}); n != int(head) {
		t.Errorf("%d events; want %d (each record once)", n, head)
	}
}

// TestOCSFVerifyNamesTampering edits, removes, swaps and repeats events
// of an exported stream; each is found and named.
func TestOCSFVerifyNamesTampering(t *testing.T) {
	dir := t.TempDir()
	w := writeLog(t, dir, 12)
	var buf bytes.Buffer
	evs := readEvents(t, dir, "r1")
	if err := WriteOCSF(&buf, evs); err != nil {
		t.Fatal(err)
	}
	head, _ := w.Head()
	lines := strings.SplitAfter(buf.String(), "\n")
	lines = lines[:len(lines)-1]
	join := func(ls ...string) []byte { return []byte(strings.Join(ls, "")) }
	without := func(i int) []byte {
		return join(append(append([]string(nil), lines[:i]...), lines[i+1:]...)...)
	}
	swapped := append([]string(nil), lines...)
	swapped[5], swapped[6] = swapped[6], swapped[5]
	tests := []struct {
		name   string
		stream []byte
		want   string // in the broken chain's error; "" = intact
	}{
		{"intact", buf.Bytes(), ""},
		{"repeated batch", join(append(append([]string(nil), lines...), lines[8:]...)...), ""},
		{"removed record", without(6), "records 7..7 are missing"},
		{"removed first", without(0), "records 1..1 are missing"},
		{"swapped", join(swapped...), "records 6..6 are missing or moved"},
		{"mapped field edited", []byte(strings.Replace(buf.String(), `"disposition":"Blocked"`, `"disposition":"Allowed"`, 1)), "disposition differ"},
		{"identity edited", []byte(strings.Replace(buf.String(), `"user":{"name":"sbx-2"}`, `"user":{"name":"sbx-9"}`, 1)), "actor differ"},
		{"record line edited", []byte(strings.Replace(buf.String(), `\"host\":\"evil.example\"`, `\"host\":\"good.example\"`, 1)), "hash mismatch"},
		{"claimed seq edited", []byte(strings.Replace(buf.String(), `"egressd_seq":3,`, `"egressd_seq":4,`, 1)), "the event's seq"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := verifyOCSF(t, tt.stream)
			reps := v.Reports()
			if len(reps) != 1 {
				t.Fatalf("reports = %+v; want one chain", reps)
			}
			err := reps[0].Err
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("verify = %v; want intact", err)
			case tt.want == "" && reps[0].Head != head:
				t.Fatalf("head = %d; want %d", reps[0].Head, head)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("verify = %v; want an error containing %q", err, tt.want)
			}
		})
	}
}

// readEvents reads the whole log of dir as events of replica.
func readEvents(t testing.TB, dir, replica string) []Event {
	t.Helper()
	rd, err := audit.NewReader([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close() //nolint:errcheck // read-only
	var evs []Event
	chain := ""
	for {
		rec, err := rd.Next()
		if err != nil {
			break
		}
		if chain == "" {
			chain = rec.Hash
		}
		evs = append(evs, Event{Line: bytes.Clone(rd.Raw), Rec: *rec, Replica: replica, Chain: chain})
	}
	return evs
}

func TestReplicasVerifyTogether(t *testing.T) {
	var all bytes.Buffer
	var heads []uint64
	for _, name := range []string{"a", "b"} {
		dir := t.TempDir()
		w := writeLog(t, dir, 10+len(heads))
		h, _ := w.Head()
		heads = append(heads, h)
		if err := WriteOCSF(&all, readEvents(t, dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	// Interleaved delivery of the two replicas' events still verifies.
	lines := strings.SplitAfter(all.String(), "\n")
	lines = lines[:len(lines)-1]
	var mixed []string
	na := int(heads[0])
	for i := range max(na, len(lines)-na) {
		if i < na {
			mixed = append(mixed, lines[i])
		}
		if na+i < len(lines) {
			mixed = append(mixed, lines[na+i])
		}
	}
	v := verifyOCSF(t, []byte(strings.Join(mixed, "")))
	reps := v.Reports()
	if !v.Ok() || len(reps) != 2 || reps[0].Head != heads[0] || reps[1].Head != heads[1] {
		t.Fatalf("reports = %+v; want replicas a and b intact at %v", reps, heads)
	}
	// A record removed from b's export is named, and a stays intact.
	cut := append(append([]string(nil), mixed[:9]...), mixed[10:]...)
	v = verifyOCSF(t, []byte(strings.Join(cut, "")))
	reps = v.Reports()
	if reps[0].Err != nil || reps[1].Err == nil || !strings.Contains(reps[1].Err.Error(), "records 5..5 are missing") {
		t.Fatalf("reports = %+v; want a intact, b missing seq 5", reps)
	}
}

// flaky fails while down is set, counting attempts.
type flaky struct {
	down     atomic.Bool
	attempts atomic.Int64
	got      atomic.Uint64
}

func (f *flaky) Name() string { return "flaky" }
func (f *flaky) Export(_ context.Context, b []Event) error {
	f.attempts.Add(1)
	if f.down.Load() {
		return errors.New("collector down")
	}
	f.got.Add(uint64(len(b)))
	return nil
}
func (f *flaky) Close(context.Context) error { return nil }

// TestOutageBlocksNoAppend: with the sink down, Append goes on, the lag
// grows, and it drains once the sink is back.
func TestOutageBlocksNoAppend(t *testing.T) {
	dir := t.TempDir()
	w := writeLog(t, dir, 5)
	f := &flaky{}
	f.down.Store(true)
	e, stop := runExporter(t, dir, fastCfg, f)
	defer stop()
	testwait.For(t, "a failed attempt", 10*time.Second, func() error {
		if f.attempts.Load() < 2 {
			return errors.New("no retry yet")
		}
		return nil
	})
	appendN(t, w, 200)
	head, _ := w.Head()
	if got := e.Exported()["flaky"]; got != 0 {
		t.Fatalf("exported %d during the outage; want 0", got)
	}
	f.down.Store(false)
	waitExported(t, e, "flaky", head)
	if got := f.got.Load(); got != head {
		t.Errorf("delivered %d records; want %d", got, head)
	}
}

func TestCursorSurvivesCorruption(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, dir, 3)
	if err := os.WriteFile(CursorPath(dir, "flaky"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(Options{Config: fastCfg, Dir: dir}, &flaky{})
	if err == nil || !strings.Contains(err.Error(), "delete it to export the whole log again") {
		t.Fatalf("New with a corrupt cursor = %v; want an error saying what to do", err)
	}
}
