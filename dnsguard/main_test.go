package dnsguard

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine (a server's
// listener loop, a resolver fetch that outlived its caller) outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
