// Package egressdbin builds the egressd binary once per test process for
// tests that run it as a user would (`egressd check`, `egressd serve`).
// Several packages' tests need it; one copy keeps the build and the
// clean-up in one place, and the build is deploy/build.sh, the script the
// Dockerfile runs, so every test runs the binary as it ships.
package egressdbin

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

var (
	once sync.Once
	dir  string
	path string
	err  error
)

// Build returns the path of an egressd binary built from this module,
// building it on the first call. A build failure fails t.
func Build(t testing.TB) string {
	t.Helper()
	p, err := Path()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Path is Build for a TestMain: it returns the build's error instead of
// failing a test.
func Path() (string, error) {
	once.Do(func() {
		if dir, err = os.MkdirTemp("", "egressd-bin"); err != nil {
			err = fmt.Errorf("make a directory for the binary: %w", err)
			return
		}
		path = filepath.Join(dir, "egressd")
		// Located from this file, not the working directory, so any
		// package's tests can build it.
		_, self, _, _ := runtime.Caller(0)
		script := filepath.Join(filepath.Dir(self), "..", "..", "deploy", "build.sh")
		out, buildErr := exec.Command("bash", script, path).CombinedOutput()
		if buildErr != nil {
			err = fmt.Errorf("deploy/build.sh: %w\n%s", buildErr, out)
		}
	})
	return path, err
}

// Output runs cmd (its Stdout and Stderr are set here) and returns what it
// wrote and its exit code. A command that could not run fails t with
// Errorf, so it may be called from a test's goroutines, and returns code
// -1.
func Output(t testing.TB, cmd *exec.Cmd) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Errorf("run %s: %v", cmd.Path, err)
		code = -1
	}
	return out.String(), errb.String(), code
}

// Main runs m's tests and then removes what Build made; call it from
// TestMain: os.Exit(egressdbin.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if dir != "" {
		if err := os.RemoveAll(dir); err != nil {
			fmt.Fprintf(os.Stderr, "remove the test binary: %v\n", err)
		}
	}
	return code
}
