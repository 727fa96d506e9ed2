package proxy

import (
	"errors"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"
)

// serveRaw accepts on ln until Shutdown and hands each connection to
// handle, which owns it and calls release once it is closed: that gives
// back the connection's max_conns slot (a tunnel may run on after handle
// returns). It is the accept loop of the listeners that are
// not HTTP (SOCKS5, transparent), under the same limits as the proxy
// listener's. It returns http.ErrServerClosed after a Shutdown.
func (s *Server) serveRaw(ln net.Listener, name string, handle func(c *net.TCPConn, release func())) error {
	l, err := s.admit(ln, name)
	if err != nil {
		return err
	}
	s.tunnelsMu.Lock()
	if s.draining.Load() {
		s.tunnelsMu.Unlock()
		ln.Close()
		return http.ErrServerClosed
	}
	s.rawListeners = append(s.rawListeners, ln)
	s.tunnelsMu.Unlock()
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if s.draining.Load() {
				return http.ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// As net/http does: an accept error (a connection reset
			// while queued) must not end the listener.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Debug("accept failed; retrying", zap.String("listener", name), zap.Error(err))
			time.Sleep(delay)
			continue
		}
		delay = 0
		cc, ok := c.(*clientConn)
		if !ok {
			c.Close()
			s.conns.Add(-1)
			continue
		}
		s.serving.add()
		go handle(cc.TCPConn, func() {
			s.conns.Add(-1)
			s.serving.remove()
		})
	}
}

// closeRaw closes the listeners serveRaw accepts on; the caller holds
// tunnelsMu.
func (s *Server) closeRaw() {
	for _, ln := range s.rawListeners {
		ln.Close()
	}
	s.rawListeners = nil
}
