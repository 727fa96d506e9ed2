package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/egressd/egressd/policy/sqlparse"
)

// TestMain switches the SQL parser worker on (see sqlparse.EnableWorkers)
// and points the user cache (check's test ledger) at a directory of this
// test process, not the user's own.
func TestMain(m *testing.M) {
	sqlparse.EnableWorkers()
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	cache, err := os.MkdirTemp("", "egressd-cache")
	if err != nil {
		fmt.Fprintln(os.Stderr, "make a cache directory:", err)
		return 1
	}
	defer os.RemoveAll(cache) //nolint:errcheck // a temporary directory; a leftover is harmless
	if err := os.Setenv("XDG_CACHE_HOME", cache); err != nil {
		fmt.Fprintln(os.Stderr, "set XDG_CACHE_HOME:", err)
		return 1
	}
	return m.Run()
}
