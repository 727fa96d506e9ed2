package main

import (
	"context"
	"net"
	"syscall"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// listenTransparent binds the transparent listener, with IP_TRANSPARENT
// when egressd may set it (CAP_NET_ADMIN): a TPROXY rule delivers
// connections for foreign addresses only to such a socket. Without the
// capability it listens all the same, for REDIRECT/DNAT in egressd's
// namespace and DNS steering, which need none.
func listenTransparent(addr string, log *zap.Logger) (net.Listener, error) {
	var sockErr error
	lc := net.ListenConfig{Control: func(network, _ string, c syscall.RawConn) error {
		level, opt := unix.SOL_IP, unix.IP_TRANSPARENT
		if network == "tcp6" {
			level, opt = unix.SOL_IPV6, unix.IPV6_TRANSPARENT
		}
		if err := c.Control(func(fd uintptr) { sockErr = unix.SetsockoptInt(int(fd), level, opt, 1) }); err != nil {
			return err
		}
		return nil
	}}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	if sockErr != nil {
		log.Info("transparent listener without IP_TRANSPARENT (needs CAP_NET_ADMIN): TPROXY cannot deliver to it; REDIRECT and DNS steering can",
			zap.Error(sockErr))
	}
	return ln, nil
}
