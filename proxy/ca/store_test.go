package ca

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenRefusesUnsafeKeyFile: a root key that group or others may read
// or write stops Open, with the chmod that fixes it (issue 14: start-up
// refuses a key file readable by others).
func TestOpenRefusesUnsafeKeyFile(t *testing.T) {
	tests := []struct {
		name string
		mode os.FileMode
		ok   bool
	}{
		{"owner only", 0o600, true},
		{"owner read-only", 0o400, true},
		{"world readable", 0o644, false},
		{"group readable", 0o640, false},
		{"group writable", 0o620, false},
		{"others writable", 0o602, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, key := storedRoot(t, "sandbox-a")
			if err := os.Chmod(key, tt.mode); err != nil {
				t.Fatal(err)
			}
			_, err := Open(dir, Options{})
			if tt.ok && err != nil {
				t.Errorf("Open with key mode %04o: %v; want it accepted", tt.mode, err)
			}
			if !tt.ok && (err == nil || !strings.Contains(err.Error(), "chmod 600 "+key)) {
				t.Errorf("Open with key mode %04o = %v; want a refusal saying `chmod 600 %s`", tt.mode, err, key)
			}
		})
	}
}

// TestOpenRefusesKeyOfAnotherUser: a key another user owns could be
// replaced by that user at will.
func TestOpenRefusesKeyOfAnotherUser(t *testing.T) {
	dir, key := storedRoot(t, "sandbox-a")
	other := os.Geteuid() + 4242
	if err := os.Chown(key, other, -1); err != nil {
		t.Fatalf("chown the key to uid %d (the test needs root, as CI runs): %v", other, err)
	}
	if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("chown %d %s", os.Geteuid(), key)) {
		t.Errorf("Open with a key owned by uid %d = %v; want a refusal saying `chown %d %s`", other, err, os.Geteuid(), key)
	}
}

// TestOpenRefusesDirWritableByOthers: anyone who can write the directory
// can swap a root.
func TestOpenRefusesDirWritableByOthers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	if err := Init(dir); err != nil {
		t.Fatalf("Init: %v", err)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("Init made %v, %v; want a 0700 directory", fi, err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "chmod o-w "+dir) {
		t.Errorf("Open(0777 dir) = %v; want a refusal saying `chmod o-w %s`", err, dir)
	}
	if err := os.Chmod(dir, 0o770); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{}); err != nil {
		t.Errorf("Open(0770 dir) = %v; want it accepted (Kubernetes fsGroup volumes are group-writable)", err)
	}
}

// TestHostileIdentityStaysInDir: identity names that are paths, dots, NUL
// or the names of egressd's own files each get a root inside the CA
// directory, distinct from every other identity's.
func TestHostileIdentityStaysInDir(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "ca")
	a, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	ids := []string{"../x", "a/b", "x\x00y", "..", ".", ".lock", ".tmp-x.key", "/etc/passwd", "../../../../tmp/evil",
		"Sandbox", "sandbox", "_" + strings.Repeat("0", 64), strings.Repeat("a", 65), "a\\b", "ü"}
	seen := map[string]string{}
	for _, id := range ids {
		r, err := a.Root(id)
		if err != nil {
			t.Fatalf("Root(%q): %v", id, err)
		}
		if prev, dup := seen[string(r.Raw)]; dup {
			t.Errorf("identities %q and %q share a root", prev, id)
		}
		seen[string(r.Raw)] = id
	}
	err = filepath.WalkDir(parent, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == parent || p == dir {
			return nil
		}
		if d.IsDir() || filepath.Dir(p) != dir {
			t.Errorf("%s is outside the CA directory or a subdirectory; every file must sit directly in %s", p, dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if want := 2*len(ids) + 1; len(ents) != want { // .crt and .key each, and .lock
		t.Errorf("CA directory holds %d files; want %d", len(ents), want)
	}
}

// TestFailedWriteLeavesNoPartialKey: a write that fails half-way (a full
// disk, or a crash) leaves no key file, whole or partial, and no
// temporary file; the next attempt creates a good root.
func TestFailedWriteLeavesNoPartialKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	a, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	orig := writeData
	t.Cleanup(func() { writeData = orig })
	writeData = func(f *os.File, b []byte) error {
		f.Write(b[:len(b)/2])
		return errors.New("disk full")
	}
	if _, err := a.Root("sandbox-a"); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Root with a failing write = %v; want the write error", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 || ents[0].Name() != lockName {
		t.Errorf("after a failed write the CA directory holds %v; want only %s", names(ents), lockName)
	}
	writeData = orig
	r, err := a.Root("sandbox-a")
	if err != nil {
		t.Fatalf("Root after the failure: %v", err)
	}
	if _, err := loadPair(filepath.Join(dir, "sandbox-a.crt"), filepath.Join(dir, "sandbox-a.key")); err != nil {
		t.Errorf("root files after a retried write: %v; want a loadable pair", err)
	}
	if !r.IsCA {
		t.Errorf("root after retry is not a CA")
	}
}

// TestOpenRecoversFromACrash: what a crash between the steps can leave (a
// temporary file; a key whose certificate was never written) is cleaned up
// or replaced; a certificate whose key is gone is refused with the fix.
func TestOpenRecoversFromACrash(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	if err := Init(dir); err != nil {
		t.Fatalf("Init: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, tmpPrefix+"sandbox-a.key-123"), []byte("-----BEGIN PRIV"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sandbox-a.key"), []byte("orphan"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open after a crash: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, tmpPrefix+"sandbox-a.key-123")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale temporary file still there (%v); want it removed", err)
	}
	if _, err := a.Root("sandbox-a"); err != nil {
		t.Errorf("Root over an orphan key: %v; want a new root", err)
	}
	if err := os.Remove(filepath.Join(dir, "sandbox-a.key")); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "has no key") {
		t.Errorf("Open with a certificate and no key = %v; want a refusal naming the missing key", err)
	}
}

// TestOpenRefusesMismatchedPair: a key that is not the certificate's stops
// Open rather than minting leaves nobody can verify.
func TestOpenRefusesMismatchedPair(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	a, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	for _, id := range []string{"a", "b"} {
		if _, err := a.Root(id); err != nil {
			t.Fatalf("Root(%s): %v", id, err)
		}
	}
	if err := os.Rename(filepath.Join(dir, "b.key"), filepath.Join(dir, "a.key")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "b.crt")); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "does not belong") {
		t.Errorf("Open with a.key from another root = %v; want a mismatch refusal", err)
	}
}

func names(ents []os.DirEntry) []string {
	out := make([]string, len(ents))
	for i, e := range ents {
		out[i] = e.Name()
	}
	return out
}

// crashDirEnv makes the test binary the child of
// TestCrashMidWriteLeavesNoPartialKey: it creates a root in that directory
// and stops half-way through writing the key, to be killed there.
const crashDirEnv = "EGRESSD_CA_TEST_CRASH_DIR"

// TestCrashMidWriteLeavesNoPartialKey: a process killed (SIGKILL) while
// writing a root's key leaves no key file, only a temporary file, which the
// next Open removes; the next root is whole.
func TestCrashMidWriteLeavesNoPartialKey(t *testing.T) {
	if dir := os.Getenv(crashDirEnv); dir != "" {
		writeData = func(f *os.File, b []byte) error {
			f.Write(b[:len(b)/2])
			f.Sync() //nolint:errcheck // the child is killed next; the parent checks what is on disk
			os.Stdout.WriteString("half written\n")
			io.ReadAll(os.Stdin) // until killed
			return errors.New("not killed")
		}
		a, err := Open(dir, Options{})
		if err == nil {
			a.Root("sandbox-a") //nolint:errcheck // the child is killed inside this call
		}
		return
	}
	dir := filepath.Join(t.TempDir(), "ca")
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashMidWriteLeavesNoPartialKey$")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "half written\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child said %q, %v; want it to stop half-way through the key", line, err)
	}
	cmd.Process.Kill()
	cmd.Wait()

	ents, _ := os.ReadDir(dir)
	var temps int
	for _, e := range ents {
		switch {
		case strings.HasPrefix(e.Name(), tmpPrefix):
			temps++
		case strings.HasSuffix(e.Name(), keyExt), strings.HasSuffix(e.Name(), certExt):
			t.Errorf("after a crash mid-write the CA directory holds %s; want no key or certificate", e.Name())
		}
	}
	if temps != 1 {
		t.Errorf("after a crash mid-write the CA directory holds %v; want the one temporary file", names(ents))
	}
	a, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open after the crash: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("Open after the crash left %v; want only %s", names(ents), lockName)
	}
	if _, err := a.Root("sandbox-a"); err != nil {
		t.Fatalf("Root after the crash: %v", err)
	}
	if _, err := loadPair(filepath.Join(dir, "sandbox-a.crt"), filepath.Join(dir, "sandbox-a.key")); err != nil {
		t.Errorf("root made after the crash: %v; want a whole pair", err)
	}
}

// storedRoot has a fresh authority mint identity's root and returns the
// authority's directory and the root's key file, for tests of what Open
// accepts on disk.
func storedRoot(t *testing.T, identity string) (dir, key string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "ca")
	a, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if _, err := a.Root(identity); err != nil {
		t.Fatalf("Root: %v", err)
	}
	return dir, filepath.Join(dir, identity+".key")
}
