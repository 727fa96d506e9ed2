package rego

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	for _, tests := range []bool{true, false} {
		dir := t.TempDir()
		if err := Write(dir, tests); err != nil {
			t.Fatalf("Write(tests=%v): %v", tests, err)
		}
		for _, f := range []string{"http.rego", "data.json", "dns/data.json", "sql/data.json", "README.md"} {
			want, _ := FS.ReadFile(f)
			got, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil || string(got) != string(want) {
				t.Errorf("Write(tests=%v): %s differs from the embedded file (%v)", tests, f, err)
			}
		}
		for _, f := range []string{"embed.go", "default_test.rego"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
				t.Errorf("Write(tests=%v) copied %s; want it left out", tests, f)
			}
		}
		_, err := os.Stat(filepath.Join(dir, "http_test.rego"))
		if tests != (err == nil) {
			t.Errorf("Write(tests=%v): http_test.rego present = %v", tests, err == nil)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mine.rego"), []byte("package x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(dir, true); err == nil {
		t.Error("Write into a non-empty directory = nil; want an error (it must not overwrite a bundle)")
	}
}
