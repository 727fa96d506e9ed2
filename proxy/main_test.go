package proxy

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine (a tunnel pipe, a
// pooled upstream connection's reader, a request's idle timer) outlives
// them.
func TestMain(m *testing.M) {
	// The readyWaiter's one goroutine serves the process, not a test.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/egressd/egressd/proxy.(*epollWaiter).loop"))
}
