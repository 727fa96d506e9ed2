package audit

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/testwait"
)

// faultDisk is a fault-injecting layer under the writer's segment files:
// writes beyond its byte budget are cut short with ENOSPC, as a full disk
// does, and fsync fails while syncErr is set.
type faultDisk struct {
	mu      sync.Mutex
	free    int64 // bytes writes may still use; < 0 means unlimited
	syncErr error
}

func (d *faultDisk) set(free int64, syncErr error) {
	d.mu.Lock()
	d.free, d.syncErr = free, syncErr
	d.mu.Unlock()
}

type faultFile struct {
	*os.File
	d *faultDisk
}

func (f faultFile) Write(b []byte) (int, error) {
	f.d.mu.Lock()
	defer f.d.mu.Unlock()
	if f.d.free < 0 || int64(len(b)) <= f.d.free {
		n, err := f.File.Write(b)
		if f.d.free >= 0 {
			f.d.free -= int64(n)
		}
		return n, err
	}
	n, _ := f.File.Write(b[:f.d.free])
	f.d.free = 0
	return n, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
}

func (f faultFile) Sync() error {
	f.d.mu.Lock()
	err := f.d.syncErr
	f.d.mu.Unlock()
	if err != nil {
		return err
	}
	return f.File.Sync()
}

// withFaultDisk routes new segment files through d for one test.
func withFaultDisk(t *testing.T) *faultDisk {
	d := &faultDisk{free: -1}
	old := wrapSegment
	wrapSegment = func(f *os.File) segFile { return faultFile{f, d} }
	t.Cleanup(func() { wrapSegment = old })
	return d
}

// waitReady polls (bounded) until Ready reports want (nil or not).
func waitReady(t *testing.T, w *Writer, ready bool) {
	t.Helper()
	testwait.For(t, fmt.Sprintf("Ready() to say ready=%v", ready), 10*time.Second, func() error {
		if err := w.Ready(); (err == nil) != ready {
			return fmt.Errorf("Ready() = %v", err)
		}
		return nil
	})
}

// TestShortWrites cuts a record mid-line, then the next segment's header
// mid-line: both torn lines stay as they are, the segment that finally
// starts names both, acknowledged records survive, and verify passes.
func TestShortWrites(t *testing.T) {
	d := withFaultDisk(t)
	c := testConfig(t, "always")
	w := mustOpen(t, c)
	defer w.Close()
	appendN(t, w, 0, 3)
	acked := map[string]bool{"req-0": true, "req-1": true, "req-2": true}

	d.set(100, nil) // the next record is cut after 100 bytes
	if err := w.Append(decisionRecord(3)); !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Append on a short write = %v; want ErrUnavailable wrapping ENOSPC", err)
	}
	waitReady(t, w, false)
	d.set(40, nil) // a probe's new segment header is cut too
	seg2 := filepath.Join(c.Dir, SegmentName(2))
	testwait.For(t, "a probe to write 40 bytes of segment 2's header", 10*time.Second, func() error {
		fi, err := os.Stat(seg2)
		if err == nil && fi.Size() != 40 {
			err = fmt.Errorf("%s has %d bytes", seg2, fi.Size())
		}
		return err
	})
	if w.Ready() == nil {
		t.Fatal("Ready() = nil with a torn segment header; want unavailable")
	}
	d.set(-1, nil)
	waitReady(t, w, true)
	appendN(t, w, 4, 2)
	acked["req-4"], acked["req-5"] = true, true
	if err := w.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}

	mustHoldAcked(t, c.Dir, acked, "after short writes")
	segs, _ := ListSegments(c.Dir)
	if len(segs) != 3 {
		t.Fatalf("segments = %d; want 3 (torn record, torn header, recovered)", len(segs))
	}
	rd := must(NewReader([]string{segs[2]}))
	hdr, err := rd.Next()
	if err != nil {
		t.Fatal(err)
	}
	if got := hdr.Detail["torn"]; !strings.HasPrefix(got, SegmentName(1)+"@") || !strings.HasSuffix(got, " "+SegmentName(2)+"@0") {
		t.Errorf("header torn = %q; want both torn lines named", got)
	}
	next, _ := rd.Next()
	if next == nil || next.Kind != KindResumed || next.Detail["refused"] == "" {
		t.Errorf("record after the header = %+v; want a resumed record", next)
	}
	rd.Close()
}

// TestSyncFailure fails fsync: the callers in that batch are refused, and
// once fsync works the writer continues in a new segment.
func TestSyncFailure(t *testing.T) {
	d := withFaultDisk(t)
	c := testConfig(t, "always")
	w := mustOpen(t, c)
	defer w.Close()
	appendN(t, w, 0, 2)
	d.set(-1, syscall.EIO)
	if err := w.Append(decisionRecord(2)); !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Append with a failing fsync = %v; want ErrUnavailable wrapping EIO", err)
	}
	d.set(-1, nil)
	waitReady(t, w, true)
	appendN(t, w, 3, 2)
	if err := w.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	mustVerify(t, c.Dir)
	if st := w.Stats(); st.SyncErrors == 0 {
		t.Errorf("Stats().SyncErrors = 0; want the failure counted")
	}
	segs, _ := ListSegments(c.Dir)
	rd := must(NewReader([]string{segs[len(segs)-1]}))
	defer rd.Close()
	if hdr, err := rd.Next(); err != nil || hdr.Detail["reason"] != "sync_error" {
		t.Errorf("last segment header = %+v, %v; want reason sync_error", hdr, err)
	}
}
