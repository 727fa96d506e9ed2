// Package testledger remembers, in the user's cache directory, which policy
// bundles passed their Rego tests under which egressd build, so that
// `egressd check` pays for the tests once per bundle and build rather than
// on every call. It implements policy.TestLedger.
//
// What it stores is only "the bundle with digest D passed its tests under
// the build B", where B is the Go build ID of the running executable (a
// hash of every input of the link, so any change to the code, the OPA
// version or the flags is another build). A decision never comes from
// here: the bundle is still read, compiled and prepared on every call.
// Every doubt (no cache directory, an executable whose build ID cannot be
// read, an entry that does not say exactly what it should) answers "not
// passed", and the tests run.
package testledger

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/egressd/egressd/internal/atomicfile"
)

// maxEntries bounds the directory: past it, Record removes the oldest
// entries. One entry is one bundle under one build, ~200 bytes.
const maxEntries = 64

// Ledger is a directory of entries, one file per bundle and build. A nil
// *Ledger remembers nothing: Passed is false, Record does nothing.
type Ledger struct {
	dir   string
	build string
}

// Open returns the ledger of the running executable under the user's
// cache directory ($XDG_CACHE_HOME/egressd/tests-passed, else
// ~/.cache/egressd/tests-passed), or nil when there is no cache directory
// or the executable's build ID cannot be read.
func Open() *Ledger {
	cache, err := os.UserCacheDir()
	if err != nil {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	build, err := BuildID(exe)
	if err != nil {
		return nil
	}
	return New(filepath.Join(cache, "egressd", "tests-passed"), build)
}

// New returns the ledger in dir for the build with this ID. An empty
// build ID gives nil: an unidentified build has no ledger.
func New(dir, build string) *Ledger {
	if build == "" {
		return nil
	}
	return &Ledger{dir: dir, build: build}
}

// entry is the file name and the exact content of digest's entry.
func (l *Ledger) entry(digest string) (name string, content []byte) {
	content = fmt.Appendf(nil, "egressd rego tests passed\nbuild %s\npolicy %s\n", l.build, digest)
	sum := sha256.Sum256(content)
	return filepath.Join(l.dir, hex.EncodeToString(sum[:])), content
}

// Passed reports whether Record was called for digest under this build:
// the entry exists and says exactly that.
func (l *Ledger) Passed(digest string) bool {
	if l == nil || digest == "" {
		return false
	}
	name, want := l.entry(digest)
	f, err := os.Open(name)
	if err != nil {
		return false
	}
	defer f.Close() //nolint:errcheck // opened for reading: nothing to lose
	got := make([]byte, len(want)+1)
	n, err := f.Read(got)
	if err != nil {
		return false
	}
	return bytes.Equal(got[:n], want)
}

// Record writes digest's entry atomically (a temporary file renamed into
// place, so a reader sees all of it or nothing), then prunes the
// directory to maxEntries. Failures are dropped: an entry that is not
// there only costs the next check a test run.
func (l *Ledger) Record(digest string) {
	if l == nil || digest == "" {
		return
	}
	if err := l.write(digest); err != nil {
		return
	}
	l.prune()
}

func (l *Ledger) write(digest string) error {
	if err := os.MkdirAll(l.dir, 0o700); err != nil {
		return err
	}
	name, content := l.entry(digest)
	return atomicfile.Write(name, content, 0o600)
}

// prune removes the oldest files past maxEntries (a temporary file a
// killed writer left behind counts as one, and goes as it ages).
func (l *Ledger) prune() {
	des, err := os.ReadDir(l.dir)
	if err != nil || len(des) <= maxEntries {
		return
	}
	type aged struct {
		name string
		mod  int64
	}
	var es []aged
	for _, de := range des {
		info, err := de.Info()
		if err != nil {
			continue
		}
		es = append(es, aged{de.Name(), info.ModTime().UnixNano()})
	}
	slices.SortFunc(es, func(a, b aged) int { return int(min(max(b.mod-a.mod, -1), 1)) })
	for _, e := range es[min(maxEntries, len(es)):] {
		os.Remove(filepath.Join(l.dir, e.name)) //nolint:errcheck // best effort: the next Record tries again
	}
}

// BuildID reads the Go build ID from the ELF executable at path (its
// .note.go.buildid note, which the Go linker writes in every build). Other
// formats are an error: no ledger for them.
func BuildID(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("build id of %s: %w", path, err)
	}
	defer f.Close() //nolint:errcheck // opened for reading: nothing to lose
	s := f.Section(".note.go.buildid")
	if s == nil {
		return "", fmt.Errorf("build id of %s: no .note.go.buildid section", path)
	}
	note, err := s.Data()
	if err != nil {
		return "", fmt.Errorf("build id of %s: %w", path, err)
	}
	id, ok := goNote(note, f.ByteOrder)
	if !ok {
		return "", fmt.Errorf("build id of %s: malformed .note.go.buildid", path)
	}
	return id, nil
}

// goNote reads the ELF note the Go linker writes: namesz (4), descsz,
// type 4, the name "Go\x00\x00", then the build ID.
func goNote(b []byte, bo binary.ByteOrder) (string, bool) {
	const hdr, goBuildIDType = 12, 4
	if len(b) < hdr {
		return "", false
	}
	namesz, descsz, typ := bo.Uint32(b), bo.Uint32(b[4:]), bo.Uint32(b[8:])
	nameEnd := hdr + uint64(namesz)
	descStart := hdr + (uint64(namesz)+3)&^3
	if typ != goBuildIDType || nameEnd > uint64(len(b)) || string(b[hdr:nameEnd]) != "Go\x00\x00" ||
		descStart+uint64(descsz) > uint64(len(b)) {
		return "", false
	}
	id := string(b[descStart : descStart+uint64(descsz)])
	if id == "" || strings.ContainsAny(id, "\n\x00") {
		return "", false
	}
	return id, true
}
