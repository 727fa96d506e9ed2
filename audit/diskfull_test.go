package audit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testwait"
)

// mountTmpfs mounts a tmpfs of size bytes in a temp dir (the tests run as
// root) and unmounts it in cleanup.
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("mount tmpfs (the disk-full test needs root): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fillUp appends to path until the file system is full, in shrinking
// writes so that no free byte is left.
func fillUp(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, n := range []int{64 << 10, 4096, 512, 1} {
		buf := make([]byte, n)
		for i := 0; i < 1<<20; i++ {
			if _, err := f.Write(buf); err != nil {
				break
			}
		}
	}
}

// snapshot reads every file in dir.
func snapshot(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	segs, err := ListSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string][]byte{}
	for _, s := range segs {
		m[s] = must(os.ReadFile(s))
	}
	return m
}

// TestDiskFull fills a small tmpfs under the writer: appends fail with
// ErrUnavailable, Ready reports it, nothing already written changes, and
// appends resume on their own once space is freed.
func TestDiskFull(t *testing.T) {
	for _, mode := range []string{"always", "interval"} {
		t.Run(mode, func(t *testing.T) {
			// Room, once the filler goes, for every record the loop below
			// can have queued (interval mode acknowledges on queueing, and a
			// loaded machine queues thousands before the writer runs).
			root := mountTmpfs(t, 4<<20)
			filler := filepath.Join(root, "filler")
			if err := os.WriteFile(filler, make([]byte, 200<<10), 0o600); err != nil {
				t.Fatal(err)
			}
			c := DefaultConfig()
			c.Dir = filepath.Join(root, "audit")
			c.Sync = mode
			c.MaxSegmentBytes = 16 << 10
			w := mustOpen(t, c)
			defer w.Close()
			fillUp(t, filler)

			acked := map[string]bool{}
			var failed error
			for i := 0; i < 5000 && failed == nil; i++ {
				r := decisionRecord(i)
				if err := w.Append(r); err != nil {
					failed = err
					break
				}
				acked[r.Request] = true
				if mode == "interval" && i%20 == 0 {
					// Pacing, the behaviour under test: appends spread
					// over time let the writer hit the full disk between
					// them (mode "interval"), not in one burst.
					time.Sleep(time.Millisecond)
				}
			}
			if !errors.Is(failed, ErrUnavailable) {
				t.Fatalf("Append on a full disk = %v; want ErrUnavailable", failed)
			}
			if err := w.Ready(); !errors.Is(err, ErrUnavailable) {
				t.Errorf("Ready() on a full disk = %v; want ErrUnavailable", err)
			}
			before := snapshot(t, c.Dir)
			if err := w.Append(decisionRecord(-1)); !errors.Is(err, ErrUnavailable) {
				t.Errorf("Append while down = %v; want ErrUnavailable", err)
			}
			if st := w.Stats(); st.WriteErrors == 0 || st.Refused == 0 {
				t.Errorf("Stats() = %+v; want write errors and refusals counted", st)
			}

			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			testwait.For(t, "Ready() to return nil after space was freed", 10*time.Second, w.Ready)
			r := decisionRecord(100000)
			if err := w.Append(r); err != nil {
				t.Fatalf("Append after space was freed = %v", err)
			}
			acked[r.Request] = true
			if err := w.Close(); err != nil {
				t.Fatalf("Close() = %v", err)
			}

			for path, old := range before {
				now := must(os.ReadFile(path))
				if !bytes.HasPrefix(now, old) {
					t.Errorf("%s changed while the disk was full; want only appends", path)
				}
			}
			mustHoldAcked(t, c.Dir, acked, "after the disk was full")
			resumed := false
			rd := must(NewReader([]string{c.Dir}))
			for rec, err := rd.Next(); err == nil; rec, err = rd.Next() {
				resumed = resumed || rec.Kind == KindResumed
			}
			rd.Close()
			if !resumed {
				t.Errorf("no %s record after the outage", KindResumed)
			}
		})
	}
}
