//go:build !linux

package proxy

import (
	"net"
	"net/netip"
)

// originalDst is c's local address: without netfilter there is no
// SO_ORIGINAL_DST, and a redirected connection's original destination is
// its local address only under TPROXY.
func originalDst(c *net.TCPConn) (netip.AddrPort, error) {
	ap := c.LocalAddr().(*net.TCPAddr).AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}
