package ca

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// rootUID owns the files of a Kubernetes Secret volume.
const rootUID = 0

// checkDir refuses a CA directory that others may write to: anyone who can
// replace a root's files can make every sandbox of that identity trust a
// key they hold. A group-writable directory is allowed (Kubernetes' fsGroup
// makes volumes so), and so is any mode on a read-only mount: a Secret
// volume's directory is 1777, but nobody in the container can write it.
func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("CA directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("CA directory %s is not a directory", dir)
	}
	if fi.Mode().Perm()&0o002 != 0 && !readOnlyMount(dir) {
		return fmt.Errorf("CA directory %s is writable by others (mode %04o); fix it with `chmod o-w %s` (0700 is best)",
			dir, fi.Mode().Perm(), dir)
	}
	return nil
}

// readOnlyMount reports whether dir is on a read-only mount (a volume
// mounted readOnly). A test replaces it, since mounting needs privileges
// CI may lack.
var readOnlyMount = func(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Flags&unix.ST_RDONLY != 0
}

// readOnlyDir reports whether egressd cannot write dir: a read-only mount
// (a mounted Secret), or a directory its user may not write. Roots are
// then only loaded, never created, and no lock is taken: a directory
// nobody can write cannot change under a reader.
var readOnlyDir = func(dir string) bool {
	return readOnlyMount(dir) || unix.Access(dir, unix.W_OK) != nil
}

// checkKeyFile refuses a private key that anyone but egressd may read or
// write: a sandbox that could read it could mint certificates for any
// host, for itself or, with a configured shared key, for others.
func checkKeyFile(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("CA key: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("CA key %s: no owner information (%T)", path, fi.Sys())
	}
	return keyFileOwner{
		Path: path, UID: st.Uid, GID: st.Gid, Mode: fi.Mode().Perm(),
		EUID: uint32(os.Geteuid()), EGID: uint32(os.Getegid()),
	}.check()
}

// keyFileOwner is what checkKeyFile decides on: a key file's owner, group
// and mode, and egressd's own uid and gid.
type keyFileOwner struct {
	Path       string
	UID, GID   uint32
	Mode       fs.FileMode
	EUID, EGID uint32
}

// check accepts two shapes of key file. egressd's own file (what it
// writes: 0600) must give group and others nothing. A root-owned file (a
// Kubernetes Secret mounted with defaultMode 0440 and fsGroup) is accepted
// only read-only (0400 or 0440) and in egressd's group, so the only users
// who can read it are root and egressd's group, and nobody in the
// container can replace it.
func (k keyFileOwner) check() error {
	secretVolume := k.UID == rootUID && (k.Mode == 0o400 || k.Mode == 0o440) && k.GID == k.EGID
	if secretVolume {
		return nil
	}
	if k.UID == k.EUID {
		if k.Mode&0o077 != 0 {
			return fmt.Errorf("CA key %s is readable or writable by group or others (mode %04o); fix it with `chmod 600 %s`",
				k.Path, k.Mode, k.Path)
		}
		return nil
	}
	if k.UID != rootUID {
		return fmt.Errorf("CA key %s is owned by uid %d, not by egressd's uid %d or root; fix it with `chown %d %s`",
			k.Path, k.UID, k.EUID, k.EUID, k.Path)
	}
	if k.Mode != 0o400 && k.Mode != 0o440 {
		return fmt.Errorf("CA key %s is owned by root with mode %04o; a root-owned key must be 0440 or 0400 "+
			"(a Kubernetes Secret volume: defaultMode: 0440), or fix it with `chmod 440 %s`", k.Path, k.Mode, k.Path)
	}
	if k.GID != k.EGID {
		return fmt.Errorf("CA key %s is owned by root and group %d, not egressd's group %d; "+
			"set the pod's securityContext.fsGroup to %d, or fix it with `chgrp %d %s`",
			k.Path, k.GID, k.EGID, k.EGID, k.EGID, k.Path)
	}
	return nil
}
