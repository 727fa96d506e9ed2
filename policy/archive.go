package policy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"
)

// The bundle archive keeps the sources of every bundle serve has decided
// with, keyed by digest, so that a past decision can be re-decided under
// the bundle that made it (`egressd policy replay`, `audit explain`): a
// record's "policy" field names its bundle, the archive holds it.
//
// Layout: ROOT/sha256-<hex>/<the bundle's files, as loaded>. A directory
// is written under a temporary name and renamed into place, so a reader
// sees a whole bundle or none; it is never written again. Its size is the
// loaded bundle's, each file bounded by maxBundleFile.

// ArchiveDir is the archive's directory in an audit directory.
func ArchiveDir(auditDir string) string { return filepath.Join(auditDir, "bundles") }

// archiveName is the directory name of digest ("sha256:<64 hex>"), or an
// error for anything else: a digest from a record is input, and must not
// name a path outside the archive.
// A bundle service's revision after the digest ("@REV") names the same
// files: the archive keeps them once.
func archiveName(digest string) (string, error) {
	digest, _ = SplitDigest(digest)
	h, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(h) != 64 {
		return "", fmt.Errorf("bundle digest %q is not sha256:<64 hex digits>", digest)
	}
	if _, err := hex.DecodeString(h); err != nil || strings.ToLower(h) != h {
		return "", fmt.Errorf("bundle digest %q is not sha256:<64 lower-case hex digits>", digest)
	}
	return "sha256-" + h, nil
}

// Archive writes the engine's bundle to the archive at root (see
// ArchiveDir), unless it is there already, and returns its directory.
func (e *Engine) Archive(root string) (string, error) {
	c := e.cur
	name, err := archiveName(c.digest)
	if err != nil {
		return "", err
	}
	final := filepath.Join(root, name)
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("archive bundle %s: %w", c.digest, err)
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	// A dot name: readBundle skips it, and a crash leaves no half bundle
	// under a digest's name.
	tmp := filepath.Join(root, ".tmp-"+name+"-"+hex.EncodeToString(rnd[:]))
	if err := writeSources(tmp, c.srcs); err != nil {
		_ = os.RemoveAll(tmp)
		return "", fmt.Errorf("archive bundle %s: %w", c.digest, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		_ = os.RemoveAll(tmp)
		if _, serr := os.Stat(final); serr == nil {
			// Another process archived the same bundle first.
			return final, nil
		}
		return "", fmt.Errorf("archive bundle %s: %w", c.digest, err)
	}
	return final, nil
}

// writeSources writes srcs under dir, read-only.
func writeSources(dir string, srcs []source) error {
	for _, s := range srcs {
		p := filepath.Join(dir, filepath.FromSlash(s.name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
		if err != nil {
			return err
		}
		_, err = f.Write(s.data)
		if serr := f.Sync(); err == nil {
			err = serr
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// ErrNotArchived is returned by NewArchived for a digest the archive does
// not hold.
var ErrNotArchived = errors.New("bundle not archived")

// NewArchived loads the archived bundle of digest from root, with cfg's
// other settings (cfg.Dir is replaced), and checks that it still has that
// digest.
func NewArchived(ctx context.Context, cfg Config, root, digest string, log *zap.Logger) (*Engine, error) {
	name, err := archiveName(digest)
	if err != nil {
		return nil, err
	}
	cfg.UseDir(filepath.Join(root, name))
	if _, err := os.Stat(cfg.Dir); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s (no %s)", ErrNotArchived, digest, cfg.Dir)
	}
	// A bundle service's revision is not among the files: the loaded
	// engine carries the one the record names, so that it decides with
	// that record's policy id.
	_, rev := SplitDigest(digest)
	e, err := newEngine(ctx, cfg, rev, log)
	if err != nil {
		return nil, err
	}
	if e.Digest() != digest {
		return nil, fmt.Errorf("archived bundle %s loads as %s: the archive was altered", digest, e.Digest())
	}
	return e, nil
}
