// Package testwait polls a condition for tests that have no signal to wait
// on, and says why it gave up: the condition reports what is still missing
// as an error, and a timeout names the last one instead of a bare "timed
// out" (tailscale's tstest.WaitFor).
//
// Prefer a signal where there is one (audittest.Recorder.Wait, a channel
// closed by the code under test); poll only across a process or a kernel
// boundary (a child's readiness, a listener closing, a file growing).
package testwait

import (
	"fmt"
	"testing"
	"time"
)

// The pause between tries starts at minPause and doubles up to maxPause:
// fast conditions are seen at once, slow ones cost few tries.
const (
	minPause = time.Millisecond
	maxPause = 50 * time.Millisecond
)

// For calls fn until it returns nil, and fails tb, naming what and fn's
// last error, if it has not after max. fn may itself fail tb (Fatal) to
// stop waiting for something that can no longer happen.
func For(tb testing.TB, what string, max time.Duration, fn func() error) {
	tb.Helper()
	if err := Poll(what, max, fn); err != nil {
		tb.Fatal(err)
	}
}

// Poll is For for callers without a testing.TB (a TestMain, a helper that
// returns its error): it returns the timeout as an error naming what and
// fn's last error, or nil once fn has returned nil.
func Poll(what string, max time.Duration, fn func() error) error {
	deadline := time.Now().Add(max)
	pause := minPause
	for {
		err := fn()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gave up after %v waiting for %s: %w", max, what, err)
		}
		time.Sleep(pause)
		pause = min(2*pause, maxPause)
	}
}
