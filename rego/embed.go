// Package rego is egressd's default policy bundle: the Rego modules of every
// entry point, their tests, and the default rules in data.json. It is
// embedded so that the binary runs with no policy directory; an operator's
// bundle directory has the same layout.
package rego

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// FS is the embedded default bundle. The policy loader reads only .rego
// modules and data.json/data.yaml files from it; this Go file is ignored.
//
//go:embed *
var FS embed.FS

// Write copies the embedded bundle's modules, data files and README into
// dir, which must not exist or be empty, so an operator can start a bundle
// of their own from it. default_test.rego is always left out: it asserts the
// default rules, which the operator's data.json replaces. Without tests the
// other *_test.rego files are left out too.
func Write(dir string, tests bool) error {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("write bundle: %s is not empty", dir)
	}
	return fs.WalkDir(FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if !bundleFile(p) || p == "default_test.rego" || (!tests && strings.HasSuffix(p, "_test.rego")) {
			return nil
		}
		b, err := FS.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return fmt.Errorf("write bundle: %w", err)
		}
		return nil
	})
}

func bundleFile(p string) bool {
	switch filepath.Ext(p) {
	case ".rego", ".json", ".yaml":
		return true
	}
	return p == "README.md"
}
