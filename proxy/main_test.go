package proxy

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine (a tunnel pipe, a
// pooled upstream connection's reader, a request's idle timer) outlives
// them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
