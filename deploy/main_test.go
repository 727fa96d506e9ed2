package deploy

import (
	"os"
	"testing"

	"github.com/egressd/egressd/internal/egressdbin"
	"github.com/egressd/egressd/policy/sqlparse"
)

// TestMain switches the SQL parser worker on (a deep text is parsed in a
// re-run of this test binary, which serves there instead of testing), and
// removes the binary egressdbin.Build built.
func TestMain(m *testing.M) {
	sqlparse.EnableWorkers()
	os.Exit(egressdbin.Main(m))
}
