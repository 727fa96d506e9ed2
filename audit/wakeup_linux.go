package audit

import "golang.org/x/sys/unix"

// wakeSlice is the scheduler slice the writer's thread asks for: the
// shortest Linux grants a SCHED_OTHER task (0.1 ms).
const wakeSlice = 100_000 // ns

// preferWakeups asks the kernel to run the calling thread soon after it
// wakes (a short EEVDF slice, sched_setattr's sched_runtime, Linux 6.12+),
// without raising its priority, which needs privilege. The writer's thread
// sleeps in fsync most of the time; pinned to a core that egressd's busy
// threads share, its return from fsync waits for their slice to end, and
// with sync: interval every Append waits once the oldest unsynced record
// passes SyncInterval (issue 28). In runtime traces of the bench's
// saturated keep-alive GET (four interleaved pairs) the hint cut the
// writer's fsync p50 from 4.9–5.3 ms to 3.8–4.5 ms and the time requests
// spent waiting in Append by 40% (median). A kernel that does not know
// the hint refuses or ignores it; nothing depends on it.
func preferWakeups() {
	_ = unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_NORMAL, Runtime: wakeSlice}, 0)
}
