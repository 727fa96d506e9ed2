package ca

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestCheckAgreesWithOpen: for each state of a CA directory, Check refuses
// exactly when Open does, with Open's message, and leaves the directory
// as it found it (`serve --check` writes nothing).
func TestCheckAgreesWithOpen(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T) (dir string, o Options)
		ok    bool
	}{
		{"absent (Open creates it)", func(t *testing.T) (string, Options) {
			return filepath.Join(t.TempDir(), "ca"), Options{}
		}, true},
		{"one root", func(t *testing.T) (string, Options) {
			dir, _ := storedRoot(t, "sandbox-a")
			return dir, Options{}
		}, true},
		{"dir writable by others", func(t *testing.T) (string, Options) {
			dir, _ := storedRoot(t, "sandbox-a")
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			return dir, Options{}
		}, false},
		{"key readable by others", func(t *testing.T) (string, Options) {
			dir, key := storedRoot(t, "sandbox-a")
			if err := os.Chmod(key, 0o644); err != nil {
				t.Fatal(err)
			}
			return dir, Options{}
		}, false},
		{"cert without its key", func(t *testing.T) (string, Options) {
			dir, key := storedRoot(t, "sandbox-a")
			if err := os.Remove(key); err != nil {
				t.Fatal(err)
			}
			return dir, Options{}
		}, false},
		{"configured root missing, dir absent", func(t *testing.T) (string, Options) {
			ext := t.TempDir()
			return filepath.Join(t.TempDir(), "ca"), Options{Configured: map[string]Files{
				"sandbox-a": {Cert: filepath.Join(ext, "none.crt"), Key: filepath.Join(ext, "none.key")}}}
		}, false},
		{"negative cache size", func(t *testing.T) (string, Options) {
			return filepath.Join(t.TempDir(), "ca"), Options{CacheSize: -1}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, o := tt.setup(t)
			before := listing(t, dir)
			checkErr := Check(dir, o)
			if after := listing(t, dir); after != before {
				t.Errorf("Check changed %s from %q to %q; want it to write nothing", dir, before, after)
			}
			_, openErr := Open(dir, o)
			switch {
			case tt.ok && (checkErr != nil || openErr != nil):
				t.Errorf("Check = %v, Open = %v; want both to accept", checkErr, openErr)
			case !tt.ok && (checkErr == nil || openErr == nil || checkErr.Error() != openErr.Error()):
				t.Errorf("Check = %v, Open = %v; want both to refuse with one message", checkErr, openErr)
			}
		})
	}
}

// listing is dir's entries with their modes, or "absent".
func listing(t *testing.T, dir string) string {
	t.Helper()
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "absent"
	}
	if err != nil {
		t.Fatal(err)
	}
	out := fi.Mode().String()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		out += " " + e.Name() + ":" + info.Mode().String()
	}
	return out
}
