package proxy

import (
	"io"
	"net"
	"sync/atomic"
	"time"
)

// defaultParkAfter is how long a direction waits for more bytes in a
// goroutine of its own before it parks in the readyWaiter; short, so that
// a tunnel gone quiet soon holds no goroutine, and long against the cost
// of a park (one epoll_ctl, one goroutine start), so that a busy tunnel
// rarely parks.
const defaultParkAfter = time.Second

// direction is one way of an opaque tunnel: bytes read from src, written
// to dst, counted in n. Between bursts it is parked (tunnel.park).
type direction struct {
	t        *tunnel
	dst, src net.Conn
	n        *atomic.Int64
	// flight marks the client's direction until its first flight was
	// checked (checkFirstFlight): nothing of it is piped before.
	flight  atomic.Bool
	tlsOnly bool
	// kick wakes the direction while parked; nil when it is not. Guarded
	// by tunnel.mu.
	kick func()
}

// start runs an opaque tunnel without holding a goroutine while it is
// idle: each direction runs on a goroutine of its own while bytes flow
// and parks when they stop; a timer ends the tunnel when it idles out or
// reaches its maximum lifetime. Upstream bytes flow at once (a server may
// speak first); client bytes only after the first flight passed its
// checks. done runs once both directions have ended, after the
// completion record.
func (t *tunnel) start(tlsOnly bool, done func()) {
	now := time.Now()
	t.lastActive.Store(now.UnixNano())
	t.end = t.f.start.Add(t.s.cfg.TunnelMaxLifetime)
	t.done = done
	t.live.Store(2)
	toUp := &direction{t: t, dst: t.up, src: t.client, n: &t.down2up, tlsOnly: tlsOnly}
	toUp.flight.Store(true)
	t.mu.Lock()
	// Under mu: a reload may close the tunnel meanwhile (kickParked).
	t.toUp, t.toClient = toUp, &direction{t: t, dst: t.client, src: t.up, n: &t.up2down}
	t.timer = time.AfterFunc(t.nextCheck(now), t.check)
	t.mu.Unlock()
	t.park(t.toClient)
	if len(t.early) != 0 {
		go t.toUp.run()
	} else {
		t.park(t.toUp)
	}
}

// park waits for d's source to be readable in the readyWaiter, or runs d
// at once if the tunnel is closed (close kicks only what is parked).
func (t *tunnel) park(d *direction) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed.Load() {
		go d.run()
		return
	}
	d.kick = parkedWaiter().park(d.src, func() {
		t.mu.Lock()
		d.kick = nil
		t.mu.Unlock()
		d.run()
	})
}

// run copies d while bytes flow, then parks it again or, at its end,
// ends the tunnel once both directions have.
func (d *direction) run() {
	t := d.t
	if d.flight.Load() {
		d.flight.Store(false)
		if !t.checkFirstFlight(d.tlsOnly) {
			t.close()
			t.directionDone()
			return
		}
	}
	if t.pump(d.dst, d.src, d.n) {
		t.park(d)
		return
	}
	t.directionDone()
}

// pump copies src to dst with io.Copy on the raw connections, so Linux
// can splice TCP to TCP, until src has had nothing to read for
// Server.parkAfter:
// then it reports true and the direction parks. A direction that sees EOF
// half-closes its peer; an error closes the tunnel.
func (t *tunnel) pump(dst, src net.Conn, n *atomic.Int64) bool {
	for {
		src.SetReadDeadline(time.Now().Add(t.s.parkAfter))
		// Wait for bytes before io.Copy: a splice holds a kernel pipe while
		// it blocks.
		if err := waitReadable(src); err != nil {
			if isTimeout(err) && !t.closed.Load() {
				return true
			}
			t.close()
			return false
		}
		c, err := t.s.copyTunnel(dst, src)
		if c > 0 {
			n.Add(c)
			t.lastActive.Store(time.Now().UnixNano())
		}
		switch {
		case err == nil:
			// EOF: pass the half-close on and let the other direction finish.
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite() // the peer gone: the other direction ends too
				return false
			}
			t.close()
			return false
		case isTimeout(err):
			continue
		default:
			t.close()
			return false
		}
	}
}

// nextCheck is how long until check must look at the tunnel again: its
// idle deadline, its end of life, or, while a TLS-only tunnel's first
// flight has not come, the end of its wait.
func (t *tunnel) nextCheck(now time.Time) time.Duration {
	next := minTime(t.end, time.Unix(0, t.lastActive.Load()).Add(t.s.cfg.TunnelIdleTimeout))
	if d := t.toUp; d.tlsOnly && d.flight.Load() && t.peekDeadline().After(now) {
		next = minTime(next, t.peekDeadline())
	}
	return max(next.Sub(now), 0)
}

// check is the tunnel's timer: it closes a tunnel idle for
// tunnel_idle_timeout or past its maximum lifetime, and wakes a TLS-only
// tunnel's client direction when its first flight is late, to refuse it.
func (t *tunnel) check() {
	now := time.Now()
	if t.closed.Load() {
		return
	}
	if !now.Before(t.end) || now.Sub(time.Unix(0, t.lastActive.Load())) >= t.s.cfg.TunnelIdleTimeout {
		t.close()
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if d := t.toUp; d.tlsOnly && d.flight.Load() && !now.Before(t.peekDeadline()) && d.kick != nil {
		d.kick()
	}
	t.timer.Reset(t.nextCheck(now))
}

// directionDone ends the tunnel once both directions have ended: its
// completion record, then what its opener left to do (done).
func (t *tunnel) directionDone() {
	if t.live.Add(-1) != 0 {
		return
	}
	t.close()
	t.mu.Lock()
	t.timer.Stop()
	t.mu.Unlock()
	t.completeRun()
	t.done()
}

// kickParked wakes the parked directions of a closed tunnel, so that they
// see it closed and end.
func (t *tunnel) kickParked() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, d := range []*direction{t.toUp, t.toClient} {
		if d != nil && d.kick != nil {
			d.kick()
		}
	}
}

// copyTunnel copies src to dst until EOF or an error: with io.Copy on the
// raw TCP connections, which splices on Linux, or, when the server copies
// in userspace (copyBuf), through a pooled buffer held only while bytes
// flow.
func (s *Server) copyTunnel(dst, src net.Conn) (int64, error) {
	if s.copyBufs == nil {
		return io.Copy(dst, src)
	}
	bp := s.copyBufs.Get().(*[]byte)
	defer s.copyBufs.Put(bp)
	// Wrapped so that neither side's ReadFrom or WriteTo (the splice)
	// takes over from the buffer.
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *bp)
}
