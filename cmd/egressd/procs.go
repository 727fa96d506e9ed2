package main

import (
	"os"
	"runtime"
)

// minProcs is the fewest Ps `serve` runs with.
//
// Why: a goroutine in a blocking system call keeps its P until sysmon
// takes it back (20 µs to 10 ms later). Pinned to one core, Go picks
// GOMAXPROCS=1, so the audit writer's fsync (every audit.sync_interval,
// each taking a millisecond or more) stalls every listener for its whole
// length: a runtime trace of the HTTP proxy under load showed fsync
// blocking 37% of the time, and with two Ps on the same one core p99
// latency fell several-fold at no more CPU per request. Locking the writer
// to an OS thread does not help: the P stays with the thread in the call.
const minProcs = 2

// ensureProcs raises GOMAXPROCS to minProcs unless the operator set
// GOMAXPROCS, which always wins. It is called before anything else runs.
func ensureProcs() {
	if _, set := os.LookupEnv("GOMAXPROCS"); set {
		return
	}
	if runtime.GOMAXPROCS(0) < minProcs {
		runtime.GOMAXPROCS(minProcs)
	}
}
