package proxy

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// soOriginalDst is netfilter's SO_ORIGINAL_DST (linux/netfilter_ipv4.h),
// and IP6T_SO_ORIGINAL_DST (linux/netfilter_ipv6/ip6_tables.h) on
// SOL_IPV6: both 80.
const soOriginalDst = 80

// originalDst is where the client of c meant to connect: the destination
// before a REDIRECT or DNAT in egressd's own network namespace
// (SO_ORIGINAL_DST), else c's local address — the original destination
// under TPROXY, or egressd's own address for a client that connected to
// it directly (DNS steering).
func originalDst(c *net.TCPConn) (netip.AddrPort, error) {
	local, ok := c.LocalAddr().(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("local address %v is not TCP", c.LocalAddr())
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	level := unix.SOL_IP
	if !local.AddrPort().Addr().Unmap().Is4() {
		level = unix.SOL_IPV6
	}
	var sa [unix.SizeofSockaddrInet6]byte
	n := uint32(len(sa))
	var serr syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, serr = unix.Syscall6(unix.SYS_GETSOCKOPT, fd, uintptr(level), soOriginalDst,
			uintptr(unsafe.Pointer(&sa[0])), uintptr(unsafe.Pointer(&n)), 0)
	}); err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	if serr != 0 {
		// ENOENT: no NAT entry, the connection was not redirected.
		ap := local.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
	}
	return parseSockaddr(sa[:n])
}

// parseSockaddr reads a sockaddr_in or sockaddr_in6 as the kernel wrote it.
func parseSockaddr(b []byte) (netip.AddrPort, error) {
	if len(b) < 8 {
		return netip.AddrPort{}, fmt.Errorf("original destination: short sockaddr (%d bytes)", len(b))
	}
	family := *(*uint16)(unsafe.Pointer(&b[0])) // host byte order
	port := binary.BigEndian.Uint16(b[2:4])
	switch {
	case family == unix.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), nil
	case family == unix.AF_INET6 && len(b) >= 24:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])).Unmap(), port), nil
	}
	return netip.AddrPort{}, fmt.Errorf("original destination: address family %d", family)
}
