package sqlparse

import (
	"os"
	"testing"
)

// TestMain switches the parser worker on: a deep text is parsed in a
// re-run of this test binary, which serves there instead of testing.
func TestMain(m *testing.M) {
	EnableWorkers()
	os.Exit(m.Run())
}
