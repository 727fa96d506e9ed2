package main

import (
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestServeRunsWithTwoProcsOnOneCore: pinned to one core, serve still runs
// with two Ps, so the audit writer's fsync cannot stall every listener;
// GOMAXPROCS set by the operator wins. (Issue 16: p99 latency.)
func TestServeRunsWithTwoProcsOnOneCore(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	env, hadEnv := os.LookupEnv("GOMAXPROCS")
	t.Cleanup(func() {
		if hadEnv {
			os.Setenv("GOMAXPROCS", env) //nolint:errcheck // restoring a valid name and value cannot fail
		} else {
			os.Unsetenv("GOMAXPROCS") //nolint:errcheck // unsetting a valid name cannot fail
		}
	})
	tests := []struct {
		name  string
		env   string // "" leaves GOMAXPROCS unset
		procs int    // GOMAXPROCS before serve
		want  int
	}{
		{"one core", "", 1, 2},
		{"more cores", "", 3, 3},
		{"operator's setting", "1", 1, 1},
	}
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env == "" {
				if err := os.Unsetenv("GOMAXPROCS"); err != nil {
					t.Fatal(err)
				}
			} else {
				if err := os.Setenv("GOMAXPROCS", tt.env); err != nil {
					t.Fatal(err)
				}
			}
			runtime.GOMAXPROCS(tt.procs)
			// The config does not exist: serve stops right after startup.
			if err := runServe([]string{"--config", missing}, io.Discard, io.Discard); err == nil {
				t.Fatal("runServe with a missing config = nil; want an error")
			}
			if got := runtime.GOMAXPROCS(0); got != tt.want {
				t.Errorf("GOMAXPROCS after serve = %d; want %d", got, tt.want)
			}
		})
	}
}
