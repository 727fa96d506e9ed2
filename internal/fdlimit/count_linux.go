package fdlimit

import (
	"encoding/binary"
	"fmt"
	"syscall"
)

// countOpen counts this process's open descriptors. Since Linux 6.2 the
// size stat reports for /proc/self/fd is that count, computed from the
// descriptor bitmap without a descriptor of our own; before, it is 0 and
// countDir reads the directory.
func countOpen() (int, error) {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/fd", &st); err != nil {
		return 0, fmt.Errorf("stat /proc/self/fd: %w", err)
	}
	if st.Size > 0 {
		return int(st.Size), nil
	}
	return countDir()
}

// countDir counts the entries of /proc/self/fd other than "." and "..",
// less the one reading it: linear in the descriptors open. It reads the
// directory with getdents into one buffer, allocating nothing per entry.
func countDir() (int, error) {
	fd, err := syscall.Open("/proc/self/fd", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("open /proc/self/fd: %w", err)
	}
	defer syscall.Close(fd) //nolint:errcheck // a directory opened read-only to count its entries
	buf := make([]byte, 16<<10)
	n := 0
	for {
		m, err := syscall.Getdents(fd, buf)
		if err != nil {
			return 0, fmt.Errorf("read /proc/self/fd: %w", err)
		}
		if m <= 0 {
			return n - 1, nil
		}
		// struct linux_dirent64: d_ino u64, d_off s64, d_reclen u16,
		// d_type u8, d_name NUL-terminated.
		for off := 0; off+19 < m; {
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			if reclen == 0 {
				return 0, fmt.Errorf("read /proc/self/fd: zero-length entry")
			}
			if buf[off+19] != '.' {
				n++
			}
			off += reclen
		}
	}
}
