package ca

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

const (
	certExt = ".crt"
	keyExt  = ".key"
	// tmpPrefix starts every temporary file; a crash can leave one, and
	// Open removes it. No stem starts with '.'.
	tmpPrefix = ".tmp-"
	lockName  = ".lock"
)

// checkKeys runs checkKeyFile on every key file of dir.
func checkKeys(dir string) error {
	keys, err := entries(dir, func(name string) bool { return strings.HasSuffix(name, keyExt) })
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := checkKeyFile(k); err != nil {
			return err
		}
	}
	return nil
}

// entries returns the paths of the entries of dir whose names match (not
// filepath.Glob: dir may contain glob metacharacters).
func entries(dir string, match func(name string) bool) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read CA directory: %w", err)
	}
	var out []string
	for _, e := range ents {
		if match(e.Name()) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, nil
}

// removeTemps removes the temporary files a crash left in dir. It runs
// under the directory lock, so no other process is writing one of them.
func removeTemps(dir string) error {
	tmps, err := entries(dir, func(name string) bool { return strings.HasPrefix(name, tmpPrefix) })
	if err != nil {
		return err
	}
	for _, t := range tmps {
		if err := os.Remove(t); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove stale temporary file: %w", err)
		}
	}
	return nil
}

// dirLock is an exclusive flock on dir/.lock, held while a root is
// created or the directory scanned, so that two egressd processes sharing
// a CA directory (a rolling restart, `ca export` beside `serve`) never
// create two different roots for one identity.
type dirLock struct{ f *os.File }

func lockDir(dir string) (*dirLock, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock CA directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close() //nolint:errcheck // the lock failed; that error is returned
		return nil, fmt.Errorf("lock CA directory: %w", err)
	}
	return &dirLock{f: f}, nil
}

// unlock releases the lock (closing the file drops the flock).
func (l *dirLock) unlock() { l.f.Close() } //nolint:errcheck // closing releases the flock; nothing was written

// writeData writes b to a temporary file; a test replaces it to fail
// half-way, as a crash or a full disk would.
var writeData = func(f *os.File, b []byte) error {
	_, err := f.Write(b)
	return err
}

// writeAtomic creates dir/name with data and mode: written to a temporary
// file, synced, then renamed over name, and the directory synced. A crash
// or a failed write leaves either no file or the whole file, never a part.
func writeAtomic(dir, name string, data []byte, mode os.FileMode) (err error) {
	f, err := os.CreateTemp(dir, tmpPrefix+name+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	defer func() {
		if err != nil {
			f.Close()           //nolint:errcheck // the write already failed; that error is returned
			os.Remove(f.Name()) //nolint:errcheck // a leftover temp file is removed by the next Open
		}
	}()
	if err := f.Chmod(mode); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := writeData(f, data); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Rename(f.Name(), filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync CA directory: %w", err)
	}
	defer d.Close() //nolint:errcheck // a directory opened to fsync; Sync's error is the one that counts
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync CA directory: %w", err)
	}
	return nil
}

// loadPair reads a root certificate and its key (checked with
// checkKeyFile) and makes sure they belong together and form a CA.
func loadPair(certPath, keyPath string) (*root, error) {
	if _, err := os.Stat(keyPath); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("CA certificate %s has no key %s: restore the key, or delete the certificate "+
			"to have a new root created (then give the sandboxes the new one)", certPath, keyPath)
	}
	if err := checkKeyFile(keyPath); err != nil {
		return nil, err
	}
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("read CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("read CA key: %w", err)
	}
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("CA certificate %s: no PEM CERTIFICATE block", certPath)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA certificate %s: %w", certPath, err)
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("CA certificate %s is not a CA (basicConstraints CA:true and keyUsage keyCertSign are needed)", certPath)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, fmt.Errorf("CA key %s: no PEM block", keyPath)
	}
	key, err := parseKey(kb)
	if err != nil {
		return nil, fmt.Errorf("CA key %s: %w", keyPath, err)
	}
	if pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("CA key %s does not belong to certificate %s", keyPath, certPath)
	}
	return &root{cert: cert, key: key}, nil
}

// parseKey accepts the key forms openssl writes: PKCS #8 (ECDSA, RSA,
// Ed25519), SEC 1 (ECDSA) and PKCS #1 (RSA), for configured roots from an
// existing PKI.
func parseKey(b *pem.Block) (crypto.Signer, error) {
	switch b.Type {
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(b.Bytes)
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(b.Bytes)
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
		if err != nil {
			return nil, err
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("key is %T, which cannot sign", k)
		}
		return s, nil
	}
	return nil, fmt.Errorf("PEM block %q is not a private key", b.Type)
}
