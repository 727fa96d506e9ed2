package audit

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// KeyFile is the name, in the audit directory, of the replica's local
// key for keyed digests in records (a tool call's arguments): a plain hash
// of short arguments can be reversed by trying them; an HMAC under a key
// that never leaves the box cannot, while equal arguments still compare
// equal within one replica's log.
const KeyFile = "hmac.key"

// keyBytes is the key's length.
const keyBytes = 32

// LocalKey returns the key in dir, creating it (mode 0600) on the first
// start. A key readable by others, or of the wrong length, is refused:
// anyone holding it can test guesses against the records.
func LocalKey(dir string) ([]byte, error) {
	p := filepath.Join(dir, KeyFile)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit key: %w", err)
	}
	k := make([]byte, keyBytes)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("audit key: %w", err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case err == nil:
		_, werr := f.Write(k)
		if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
			return nil, fmt.Errorf("write audit key %s: %w", p, err)
		}
		return k, nil
	case !errors.Is(err, fs.ErrExist):
		return nil, fmt.Errorf("create audit key %s: %w", p, err)
	}
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("audit key: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("audit key %s is readable by others (mode %v): chmod 600 it", p, st.Mode().Perm())
	}
	k, err = os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("read audit key: %w", err)
	}
	if len(k) != keyBytes {
		return nil, fmt.Errorf("audit key %s holds %d bytes, want %d: remove it and egressd writes a new one (digests in older records then no longer compare)", p, len(k), keyBytes)
	}
	return k, nil
}
