package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// writeConfig writes yaml to dir/egressd.yaml and returns its path, for
// the --config of the command under test.
func writeConfig(t testing.TB, dir, yaml string) string {
	t.Helper()
	cfg := filepath.Join(dir, "egressd.yaml")
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// runCLI runs egressd with args and returns the exit code, stdout and
// stderr.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = exitCode(run(args, &out, &errb), &errb)
	return code, out.String(), errb.String()
}
