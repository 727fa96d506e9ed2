package main

import (
	"os"
	"testing"

	"github.com/egressd/egressd/policy/sqlparse"
)

// TestMain switches the SQL parser worker on (see sqlparse.EnableWorkers).
func TestMain(m *testing.M) { sqlparse.EnableWorkers(); os.Exit(m.Run()) }
