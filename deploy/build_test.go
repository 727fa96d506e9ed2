package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuildScript runs deploy/build.sh, the build the Dockerfile's build
// stage runs, and checks the binary it produces works, carries the health
// subcommand the image's HEALTHCHECK calls, and reports the version and
// commit the script stamped (issue 17 item 5).
func TestBuildScript(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "egressd")
	build := exec.Command("./build.sh", bin)
	build.Env = append(os.Environ(), "EGRESSD_VERSION=v0.0.0-buildtest", "EGRESSD_COMMIT=0123abcd")
	out, err := build.CombinedOutput()
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
	out, err = exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("egressd version --json = %v", err)
	}
	var v struct {
		Version        string `json:"version"`
		Commit         string `json:"commit"`
		GoVersion      string `json:"go_version"`
		PgQueryVersion string `json:"pg_query_version"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("egressd version --json = %q: %v", out, err)
	}
	if v.Version != "v0.0.0-buildtest" || v.Commit != "0123abcd" ||
		!strings.HasPrefix(v.GoVersion, "go1.") || !strings.HasPrefix(v.PgQueryVersion, "v5.") {
		t.Errorf("egressd version = %+v; want the stamped v0.0.0-buildtest, 0123abcd, a go1.x and a pg_query v5.x", v)
	}
}
