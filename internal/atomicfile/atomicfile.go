// Package atomicfile writes a file whole or not at all: the state files
// egressd keeps beside its audit log and in its cache (grants, the test
// ledger), which a crash or a full disk must never leave half-written.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write creates or replaces path with data and mode: written to a
// temporary file in path's directory (named "." + the base name + ".tmp-…",
// so a reader of the directory can tell it from an entry), synced, renamed
// over path, and the directory synced. A crash or a failed write leaves
// either the old file or the whole new one.
func Write(path string, data []byte, mode os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()           //nolint:errcheck // the write already failed; that error is returned
			os.Remove(f.Name()) //nolint:errcheck // removing the partial temporary file; the write error is returned
		}
	}()
	if err := f.Chmod(mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("write %s: sync directory: %w", path, err)
	}
	defer d.Close() //nolint:errcheck // a directory opened to fsync; Sync's error is the one that counts
	if err := d.Sync(); err != nil {
		return fmt.Errorf("write %s: sync directory: %w", path, err)
	}
	return nil
}
