package export

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// runner, sink and test collector must stop when told.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
