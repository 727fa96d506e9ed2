package audit

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"

	"go.uber.org/zap"
)

// crashChildEnv makes the test binary act as the crash test's child: it
// appends with sync: always from several goroutines and prints the request
// id of every acknowledged record until it is killed.
const crashChildEnv = "EGRESSD_AUDIT_CRASH_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir, os.Getenv(crashChildEnv+"_ROUND"))
		return
	}
	os.Exit(m.Run())
}

func crashChild(dir, round string) {
	c := DefaultConfig()
	c.Dir = dir
	c.Sync = "always"
	c.MaxSegmentBytes = 32 << 10
	w, err := Open(c, zap.NewNop())
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(3)
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			// Bounded: the parent kills the child long before this ends.
			for i := range 100000 {
				r := decisionRecord(i)
				r.Request = fmt.Sprintf("r%s-g%d-%d", round, g, i)
				if err := w.Append(r); err != nil {
					fmt.Fprintln(os.Stderr, "append:", err)
					os.Exit(4)
				}
				mu.Lock()
				out.WriteString(r.Request + "\n")
				out.Flush()
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	os.Exit(0)
}

// TestCrashRecovery kills a sync: always writer with SIGKILL mid-stream,
// several times; after each kill the log must reopen and verify, and every
// record the child saw acknowledged must be in it.
func TestCrashRecovery(t *testing.T) {
	dir := t.TempDir()
	acked := map[string]bool{}
	for round := range 5 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, fmt.Sprintf("%s_ROUND=%d", crashChildEnv, round))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		// Kill after a varying number of acknowledgements, mid-stream.
		killAt := 200 + round*150
		n := 0
		for sc.Scan() {
			acked[sc.Text()] = true
			if n++; n == killAt {
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
		}
		io.Copy(io.Discard, stdout)
		err = cmd.Wait()
		if n < killAt {
			t.Fatalf("round %d: child acknowledged %d records, exited %v: %s", round, n, err, stderr.String())
		}

		w := mustOpen(t, Config{Dir: dir, Sync: "always", SyncInterval: DefaultConfig().SyncInterval,
			MaxSegmentBytes: 32 << 10, QueueSize: 16, CheckpointInterval: DefaultConfig().CheckpointInterval})
		if err := w.Close(); err != nil {
			t.Fatalf("round %d: Close() = %v", round, err)
		}
		mustHoldAcked(t, dir, acked, fmt.Sprintf("round %d, after the crash", round))
	}
}

// mustHoldAcked verifies the chain in dir and fails the test, naming
// them, when records acknowledged to callers (by request id) are missing
// from it: whatever the disk did, an acknowledged record is never lost.
func mustHoldAcked(t *testing.T, dir string, acked map[string]bool, when string) {
	t.Helper()
	mustVerify(t, dir)
	seen := map[string]bool{}
	for _, r := range readRecords(t, dir) {
		seen[r.Request] = true
	}
	var missing []string
	for id := range acked {
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		t.Fatalf("%s: acknowledged records missing: %v", when, missing)
	}
}
