package deploy

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuildScript runs deploy/build.sh, the build the Dockerfile's build
// stage runs, and checks the binary it produces works and carries the
// health subcommand the image's HEALTHCHECK calls.
func TestBuildScript(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "egressd")
	out, err := exec.Command("./build.sh", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("deploy/build.sh = %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "help").CombinedOutput()
	if err != nil {
		t.Fatalf("egressd help = %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "health") {
		t.Errorf("egressd help = %q; want it to list health", out)
	}
}
