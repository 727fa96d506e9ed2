package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWrite: the file holds the data with the mode, a rewrite replaces it
// whole, and no temporary file is left; a directory that cannot be written
// leaves the old file as it was.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	for _, data := range []string{"first", "second, longer"} {
		if err := Write(path, []byte(data), 0o640); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != data {
			t.Fatalf("read back %q, %v; want %q", got, err, data)
		}
		if st, _ := os.Stat(path); st.Mode().Perm() != 0o640 {
			t.Errorf("mode %v; want 0640", st.Mode().Perm())
		}
	}
	if des, _ := os.ReadDir(dir); len(des) != 1 {
		t.Errorf("directory holds %v; want the file alone", des)
	}
	if os.Geteuid() != 0 {
		os.Chmod(dir, 0o500)       //nolint:errcheck // checked by the write below failing
		defer os.Chmod(dir, 0o700) //nolint:errcheck // restoring for TempDir's cleanup
	} else {
		// root writes anywhere: fail the temporary file's creation by
		// naming a directory that does not exist instead.
		path = filepath.Join(dir, "missing", "state.json")
	}
	if err := Write(path, []byte("third"), 0o640); err == nil {
		t.Fatalf("Write into an unwritable place succeeded")
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "state.json")); string(got) != "second, longer" {
		t.Errorf("after a failed write the file holds %q; want the old content", got)
	}
}
