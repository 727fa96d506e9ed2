package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	defaultbundle "github.com/egressd/egressd/rego"
)

// composePolicyDir is the bundle docker-compose.yaml mounts: what `egressd
// policy init` writes, so that editing its data.json does not fail the
// default rules' tests (default_test.rego is not in it) and refuse the
// bundle on the next reload.
const composePolicyDir = "compose/policy"

// policyInit writes what `egressd policy init` writes into a fresh
// directory and returns it.
func policyInit(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "policy")
	if err := defaultbundle.Write(dir, true); err != nil {
		t.Fatalf("policy init: %v", err)
	}
	return dir
}

// readTree returns the files under dir keyed by slash path.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		files[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestComposePolicy keeps compose/policy equal to `egressd policy init`
// output (regenerate with `go test ./deploy -run TestComposePolicy
// -update`) and checks the compose file mounts it as egressd's policy.dir.
func TestComposePolicy(t *testing.T) {
	fresh := policyInit(t)
	if *update {
		if err := os.RemoveAll(composePolicyDir); err != nil {
			t.Fatal(err)
		}
		if err := defaultbundle.Write(composePolicyDir, true); err != nil {
			t.Fatal(err)
		}
	}
	want, got := readTree(t, fresh), readTree(t, composePolicyDir)
	var names []string
	for n := range want {
		names = append(names, n)
	}
	for n := range got {
		if _, ok := want[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		if got[n] != want[n] {
			t.Errorf("%s/%s differs from `egressd policy init` output; run go test ./deploy -run TestComposePolicy -update", composePolicyDir, n)
		}
	}
	if _, ok := got["default_test.rego"]; ok {
		t.Errorf("%s holds default_test.rego, which fails as soon as data.json is edited", composePolicyDir)
	}
	var mounted bool
	for _, v := range loadCompose(t).Services["egressd"].Volumes {
		mounted = mounted || strings.HasPrefix(v, "./"+composePolicyDir+":/etc/egressd/policy:ro")
	}
	if !mounted {
		t.Errorf("egressd volumes %q; want ./%s mounted read-only at /etc/egressd/policy", loadCompose(t).Services["egressd"].Volumes, composePolicyDir)
	}
}
