package policy_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/egressd/egressd/policy"
)

// TestCapabilitiesPinned pins the built-ins a bundle may call
// (testdata/builtins.txt): an OPA upgrade that adds one fails here until it
// is judged — added to ioBuiltins if it reaches the network, the files or
// the environment — and the list is rewritten with -update.
func TestCapabilitiesPinned(t *testing.T) {
	all := map[string]bool{}
	for _, b := range ast.CapabilitiesForThisVersion().Builtins {
		all[b.Name] = true
	}
	var kept []string
	for _, b := range policy.Capabilities().Builtins {
		kept = append(kept, b.Name)
		if _, ok := policy.IOBuiltins[b.Name]; ok {
			t.Errorf("policy.Capabilities() keeps %s; want it removed: %s", b.Name, policy.IOBuiltins[b.Name])
		}
	}
	for name := range policy.IOBuiltins {
		if !all[name] {
			t.Errorf("ioBuiltins names %s, which this OPA does not have: renamed? check what replaced it", name)
		}
	}
	if caps := policy.Capabilities(); caps.AllowNet == nil || len(caps.AllowNet) != 0 {
		t.Errorf("policy.Capabilities().AllowNet = %#v; want empty and non-nil (nil allows every host)", caps.AllowNet)
	}
	slices.Sort(kept)
	golden := filepath.Join("testdata", "builtins.txt")
	if *update {
		if err := os.WriteFile(golden, []byte(strings.Join(kept, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	pinned := strings.Fields(string(b))
	for _, name := range kept {
		if !slices.Contains(pinned, name) {
			t.Errorf("OPA offers a new built-in %s: if it does network, file or environment access add it to ioBuiltins, then rerun with -update", name)
		}
	}
	for _, name := range pinned {
		if !slices.Contains(kept, name) {
			t.Errorf("%s is pinned in %s but no longer kept; rerun with -update", name, golden)
		}
	}
}
