package audit

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// testConfig is a config writing to a fresh temp dir.
func testConfig(t testing.TB, sync string) Config {
	t.Helper()
	c := DefaultConfig()
	c.Dir = filepath.Join(t.TempDir(), "audit")
	c.Sync = sync
	return c
}

func testLogger(t testing.TB) *zap.Logger {
	if tt, ok := t.(*testing.T); ok {
		return zaptest.NewLogger(tt)
	}
	return zap.NewNop()
}

func mustOpen(t testing.TB, c Config) *Writer {
	t.Helper()
	w, err := Open(c, testLogger(t))
	if err != nil {
		t.Fatalf("Open(%s) = %v", c.Dir, err)
	}
	return w
}

// readRecords returns every record of path (a log directory or a
// segment), failing the test on a line it cannot read.
func readRecords(t *testing.T, path string) []Record {
	t.Helper()
	rd, err := NewReader([]string{path})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var out []Record
	for {
		r, err := rd.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		out = append(out, *r)
	}
}

// appendN appends decisionRecord(from) to decisionRecord(from+n-1).
func appendN(t *testing.T, w *Writer, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if err := w.Append(decisionRecord(i)); err != nil {
			t.Fatalf("Append(%d) = %v", i, err)
		}
	}
}

func decisionRecord(i int) *Record {
	return &Record{
		Kind: "http", Request: fmt.Sprintf("req-%d", i), Identity: "sandbox-a",
		Client: "10.0.0.7:51234", Method: "GET", Scheme: "https", Host: "pypi.org", Port: 443,
		Path: "/simple/requests/", IP: "151.101.0.223", Decision: "allow",
		Rule: "pypi", Policy: "sha256:0f3a",
	}
}

// mustVerify verifies dir and returns the verifier.
func mustVerify(t testing.TB, dir string) *Verifier {
	t.Helper()
	v := NewVerifier()
	if err := v.Paths([]string{dir}); err != nil {
		t.Fatalf("verify %s = %v; want intact", dir, err)
	}
	return v
}

func TestWriterAppendVerify(t *testing.T) {
	for _, mode := range []string{"interval", "always"} {
		t.Run(mode, func(t *testing.T) {
			c := testConfig(t, mode)
			c.MaxSegmentBytes = minSegmentBytes
			w := mustOpen(t, c)
			const n = 200
			appendN(t, w, 0, n)
			if err := w.Close(); err != nil {
				t.Fatalf("Close() = %v", err)
			}
			v := mustVerify(t, c.Dir)
			segs, _ := ListSegments(c.Dir)
			if v.Counts.Records != n+len(segs) || len(segs) < 2 {
				t.Errorf("verify counted %d records in %d segments; want %d + one header per segment, several segments", v.Counts.Records, len(segs), n)
			}
			w = mustOpen(t, c)
			if err := w.Append(decisionRecord(n)); err != nil {
				t.Fatalf("Append after reopen = %v", err)
			}
			if err := w.Close(); err != nil {
				t.Fatalf("Close() = %v", err)
			}
			if v2 := mustVerify(t, c.Dir); v2.Counts.Records != v.Counts.Records+1 {
				t.Errorf("after reopen verify counted %d records; want %d", v2.Counts.Records, v.Counts.Records+1)
			}
			fi, err := os.Stat(c.Dir)
			if err != nil || fi.Mode().Perm() != dirMode {
				t.Errorf("dir mode = %v, %v; want %v", fi.Mode().Perm(), err, dirMode)
			}
			for _, s := range segs {
				if fi, err := os.Stat(s); err != nil || fi.Mode().Perm() != fileMode {
					t.Errorf("%s mode = %v; want %v", s, fi.Mode().Perm(), fileMode)
				}
			}
		})
	}
}

func TestWriterConcurrent(t *testing.T) {
	for _, mode := range []string{"interval", "always"} {
		t.Run(mode, func(t *testing.T) {
			c := testConfig(t, mode)
			c.MaxSegmentBytes = 64 << 10
			w := mustOpen(t, c)
			const workers, per = 16, 100
			var wg sync.WaitGroup
			for g := range workers {
				wg.Go(func() {
					for i := range per {
						if err := w.Append(decisionRecord(g*per + i)); err != nil {
							t.Errorf("Append = %v", err)
							return
						}
					}
				})
			}
			wg.Wait()
			if err := w.Close(); err != nil {
				t.Fatalf("Close() = %v", err)
			}
			v := mustVerify(t, c.Dir)
			if got, want := v.Counts.Records-v.Counts.Segments, workers*per; got != want {
				t.Errorf("verify counted %d decision records; want %d", got, want)
			}
		})
	}
}
