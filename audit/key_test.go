package audit

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLocalKey: the first call creates a private key, later calls read the
// same key, and a key others can read, or of the wrong size, is refused.
func TestLocalKey(t *testing.T) {
	dir := t.TempDir()
	k1, err := LocalKey(dir)
	if err != nil || len(k1) != keyBytes {
		t.Fatalf("LocalKey = %d bytes, %v", len(k1), err)
	}
	st, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v; want 0600", st.Mode().Perm(), err)
	}
	k2, err := LocalKey(dir)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("second LocalKey differs or fails: %v", err)
	}
	if err := os.Chmod(filepath.Join(dir, KeyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LocalKey(dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable key: err = %v, want refused", err)
	}
	if err := os.WriteFile(filepath.Join(dir, KeyFile), []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, KeyFile), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LocalKey(dir); err == nil || !strings.Contains(err.Error(), "want 32") {
		t.Errorf("short key: err = %v, want refused", err)
	}
}
