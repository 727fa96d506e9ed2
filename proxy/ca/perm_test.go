package ca

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeyFileOwner: egressd's own key must give group and others nothing;
// a root-owned key (a Kubernetes Secret volume) is accepted only 0400 or
// 0440 and in egressd's group (issue 25: shared roots in a Secret). Every
// refusal says what fixes it.
func TestKeyFileOwner(t *testing.T) {
	const egressd, group, other = 65532, 65532, 1000
	tests := []struct {
		name     string
		uid, gid uint32
		mode     fs.FileMode
		want     string // "" accepts; else a part of the refusal
	}{
		{"own 0600", egressd, group, 0o600, ""},
		{"own 0400", egressd, group, 0o400, ""},
		{"own 0640", egressd, group, 0o640, "chmod 600"},
		{"own 0644", egressd, other, 0o644, "chmod 600"},
		{"root 0440 egressd's group", rootUID, group, 0o440, ""},
		{"root 0400 egressd's group", rootUID, group, 0o400, ""},
		{"root 0440 another group", rootUID, other, 0o440, "fsGroup to 65532"},
		{"root 0400 another group", rootUID, rootUID, 0o400, "chgrp 65532"},
		{"root 0444 world readable", rootUID, group, 0o444, "defaultMode: 0440"},
		{"root 0644", rootUID, group, 0o644, "chmod 440"},
		{"root 0460 group writable", rootUID, group, 0o460, "chmod 440"},
		{"root 0600", rootUID, group, 0o600, "chmod 440"},
		{"root 0640", rootUID, group, 0o640, "chmod 440"},
		{"another user 0440", other, group, 0o440, "chown 65532"},
		{"another user 0600", other, other, 0o600, "chown 65532"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := keyFileOwner{Path: "/ca/a.key", UID: tt.uid, GID: tt.gid, Mode: tt.mode, EUID: egressd, EGID: group}
			err := k.check()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("check(uid %d, gid %d, %04o) = %v; want accepted", tt.uid, tt.gid, tt.mode, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("check(uid %d, gid %d, %04o) = %v; want a refusal saying %q", tt.uid, tt.gid, tt.mode, err, tt.want)
			}
		})
	}
}

// TestKeyFileOwnerAsRoot: egressd running as root owns a root-owned key,
// so the 0600 rule holds, and a 0440 key in its group is accepted too.
func TestKeyFileOwnerAsRoot(t *testing.T) {
	tests := []struct {
		mode fs.FileMode
		ok   bool
	}{{0o600, true}, {0o440, true}, {0o444, false}, {0o640, false}}
	for _, tt := range tests {
		err := keyFileOwner{Path: "/ca/a.key", UID: rootUID, GID: 0, Mode: tt.mode}.check()
		if (err == nil) != tt.ok {
			t.Errorf("check(root, %04o) as root = %v; want ok %v", tt.mode, err, tt.ok)
		}
	}
}

// readOnly makes the CA directory code see dir as a read-only mount for
// the rest of the test (a Secret volume; mounting one needs privileges
// CI may lack).
func readOnly(t *testing.T, dir string) {
	t.Helper()
	mount, access := readOnlyMount, readOnlyDir
	readOnlyMount = func(d string) bool { return d == dir || mount(d) }
	readOnlyDir = func(d string) bool { return d == dir || access(d) }
	t.Cleanup(func() { readOnlyMount, readOnlyDir = mount, access })
}

// TestReadOnlyDirLoadsSharedRoots: a read-only directory (shared roots
// mounted from a Secret, whose directory is 1777) is loaded without a
// lock or a write, serves its roots, and refuses to create a missing one,
// naming the command that does.
func TestReadOnlyDirLoadsSharedRoots(t *testing.T) {
	dir, _ := storedRoot(t, "sandbox-a")
	if err := os.Remove(filepath.Join(dir, lockName)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	readOnly(t, dir)
	a, err := Open(dir, Options{Identities: []string{"sandbox-a"}})
	if err != nil {
		t.Fatalf("Open(read-only dir with sandbox-a's root) = %v; want it loaded", err)
	}
	if !a.ReadOnly() {
		t.Error("ReadOnly() = false for a read-only directory; want true")
	}
	if _, err := a.Leaf("sandbox-a", "api.github.com"); err != nil {
		t.Errorf("Leaf(sandbox-a) from shared roots = %v; want a leaf", err)
	}
	_, err = a.Leaf("sandbox-b", "api.github.com")
	if err == nil || !strings.Contains(err.Error(), "egressd ca export --ca-dir DIR --identity sandbox-b") {
		t.Errorf("Leaf(sandbox-b) with no shared root = %v; want a refusal naming `egressd ca export`", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sandbox-b.key")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a read-only directory got sandbox-b.key (%v); want nothing written", err)
	}
	if _, err := os.Stat(filepath.Join(dir, lockName)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a read-only directory got a lock file (%v); want nothing written", err)
	}
	_, err = Open(dir, Options{Identities: []string{"sandbox-a", "sandbox-b"}})
	if err == nil || !strings.Contains(err.Error(), `no root for identity "sandbox-b"`) {
		t.Errorf("Open(read-only dir without sandbox-b's root) = %v; want start-up refused for sandbox-b", err)
	}
}

// TestWritableDirCreatesRoots: the identities list checks only read-only
// directories; a writable one creates roots on first use as before.
func TestWritableDirCreatesRoots(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	a, err := Open(dir, Options{Identities: []string{"sandbox-a"}})
	if err != nil {
		t.Fatalf("Open(empty writable dir) = %v; want it accepted", err)
	}
	if a.ReadOnly() {
		t.Error("ReadOnly() = true for a writable directory; want false")
	}
	if _, err := a.Root("sandbox-a"); err != nil {
		t.Errorf("Root(sandbox-a) = %v; want a new root", err)
	}
}
