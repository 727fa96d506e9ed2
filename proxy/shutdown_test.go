package proxy

import (
	"bytes"
	"context"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

// cleanupDrainTimeout bounds a test fixture's drain. A test's flows are
// over by its end, so a drain that waits this long waits on a flow that
// never ends: the fixture reports it with the stacks that hold it instead
// of holding the package until go test's own timeout, which prints no
// test name and cuts the stacks short.
const cleanupDrainTimeout = 20 * time.Second

// shutdownOnCleanup drains s when tb ends, bounded, and fails tb with the
// proxy's goroutines if the drain had to cut what was still running.
func shutdownOnCleanup(tb testing.TB, s *Server) {
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupDrainTimeout)
		defer cancel()
		var stacks bytes.Buffer
		timer := time.AfterFunc(cleanupDrainTimeout-time.Second, func() {
			pprof.Lookup("goroutine").WriteTo(&stacks, 1) //nolint:errcheck // a bytes.Buffer does not fail
		})
		err := s.Shutdown(ctx)
		timer.Stop()
		if err != nil {
			tb.Errorf("proxy drain at the end of the test: %v; what was still running:\n%s", err, proxyStacks(stacks.String()))
		}
	})
}

// proxyStacks keeps the goroutine profile's entries that run proxy code.
func proxyStacks(profile string) string {
	var b strings.Builder
	for _, g := range strings.Split(profile, "\n\n") {
		if strings.Contains(g, "egressd/proxy.") {
			b.WriteString(g)
			b.WriteString("\n\n")
		}
	}
	return b.String()
}
