package pggate

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"syscall"
	"time"
)

// clientGone returns a context that ends when the client closes its
// connection (or the session closes it), for a parse that may run long in a
// worker: the session's goroutine is busy deciding and reads nothing, so
// the socket is watched by peeking at it (MSG_PEEK reads nothing away from
// the protocol reader). stop ends the watch and must be called before the
// session reads from the client again.
//
// Only an orderly close or a reset with nothing else pending is seen: a
// client that pipelined its next message (or a TLS close_notify) has bytes
// waiting, and the watch gives up rather than consume them; the worker's
// own timeout still bounds that parse.
func (s *session) clientGone() (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	conn := s.client
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return ctx, cancel
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return ctx, cancel
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var buf [1]byte
		gone := false
		err := raw.Read(func(fd uintptr) bool {
			n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if errors.Is(err, syscall.EAGAIN) {
				return false // nothing yet: wait for readability
			}
			gone = n == 0 || err != nil
			return true
		})
		// A closed session closes the client too, which ends the
		// watch with an error that is not a timeout.
		if gone || err != nil && !isTimeout(err) {
			cancel()
		}
	}()
	return ctx, func() {
		// Wake the watch; the session's next read sets its own deadline
		// again (clientRead is reset so that it does).
		s.client.SetReadDeadline(time.Now())
		<-done
		s.client.SetReadDeadline(time.Time{})
		s.clientRead = deadline{}
		cancel()
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
