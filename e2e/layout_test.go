package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/egressd/egressd/"

// goList runs go list in the module root with a template and returns its
// lines.
func goList(t *testing.T, format string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", format, "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// TestReadmeLayoutIsGoList holds README's layout table to the module's
// packages, as the reason table is held to README: a package the table does
// not place, or a row for a package that is gone, fails.
func TestReadmeLayoutIsGoList(t *testing.T) {
	f, err := os.Open("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case l == "## Layout":
			in = true
		case in && strings.HasPrefix(l, "## "):
			in = false
		case in && strings.HasPrefix(l, "| `"):
			dir, _, _ := strings.Cut(strings.TrimPrefix(l, "| `"), "`")
			rows = append(rows, dir)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	for _, p := range goList(t, "{{.ImportPath}}") {
		pkgs = append(pkgs, strings.TrimPrefix(p, module))
	}
	for _, p := range pkgs {
		if !slices.Contains(rows, p) {
			t.Errorf("package %s has no row in README's layout table", p)
		}
	}
	for _, r := range rows {
		if !slices.Contains(pkgs, r) {
			t.Errorf("README's layout table has a row for %s, which go list does not list", r)
		}
	}
}

// TestNothingBelowImportsProxy keeps dependencies pointing down: what every
// listener shares lives in internal/, so no package outside proxy/ and
// cmd/ imports a proxy package, its tests included.
func TestNothingBelowImportsProxy(t *testing.T) {
	for _, l := range goList(t, "{{.ImportPath}} {{join .Imports \" \"}} {{join .TestImports \" \"}} {{join .XTestImports \" \"}}") {
		f := strings.Fields(l)
		pkg := strings.TrimPrefix(f[0], module)
		if pkg == "proxy" || strings.HasPrefix(pkg, "proxy/") || strings.HasPrefix(pkg, "cmd/") {
			continue
		}
		for _, imp := range f[1:] {
			if rel, ok := strings.CutPrefix(imp, module); ok && (rel == "proxy" || strings.HasPrefix(rel, "proxy/")) {
				t.Errorf("%s imports %s: move what it needs to internal/", pkg, rel)
			}
		}
	}
}
