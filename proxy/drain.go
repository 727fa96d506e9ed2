package proxy

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/egressd/egressd/policy"
)

// drainCutDetail is the error of a record of what a drain ended at its
// deadline.
const drainCutDetail = "cut at the drain deadline (proxy.drain_timeout)"

// cutGrace bounds how long a drain past its deadline waits for the
// handlers of the connections it closed to write their records: closed
// connections fail their reads and writes at once, so this is only a
// guard against a handler that does not return.
const cutGrace = 5 * time.Second

// Shutdown stops accepting, waits for in-flight requests and tunnels until
// ctx is done, then cuts what is left: tunnels are closed with a
// completion record carrying reason shutting_down, and so are the requests
// still in flight (plain or inside an inspected tunnel), whose connections
// are closed; it returns once their records are written.
func (s *Server) Shutdown(ctx context.Context) error {
	// Set under the tunnel lock so no tunnel is tracked after Wait starts.
	s.tunnelsMu.Lock()
	if s.draining.Swap(true) {
		// A second Shutdown: the first one drains.
		s.tunnelsMu.Unlock()
		return nil
	}
	s.closeRaw()
	for t := range s.tunnels {
		if inner := t.inner.Load(); inner != nil {
			// Finishes the request in flight and closes the
			// connection; ends when it is closed, at the latest when
			// the tunnel is closed below.
			go inner.Shutdown(context.Background()) //nolint:errcheck // no deadline: it returns nil once the connection has gone
		}
	}
	s.tunnelsMu.Unlock()
	err := s.srv.Shutdown(ctx)
	done := make(chan struct{})
	go func() { s.tunnelsWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	if ctx.Err() != nil {
		// Set before anything is closed, so that each flow that fails
		// from here on is recorded as cut, not as its client leaving.
		s.cut.Store(true)
		s.tunnelsMu.Lock()
		for t := range s.tunnels {
			t.revoke(policy.ReasonShuttingDown)
		}
		s.tunnelsMu.Unlock()
		s.srv.Close() //nolint:errcheck // its error is the listeners', closed already by Shutdown
		<-done
		if !s.serving.wait(cutGrace) {
			s.log.Warn("drain: handlers of cut connections still running", zap.Duration("waited", cutGrace))
		}
		err = cmp.Or(err, ctx.Err())
	}
	s.state.Load().closeIdle()
	return err
}

// cutReason is the completion of a flow whose client connection failed:
// shutting_down once a drain has cut connections, client_closed before.
func (s *Server) cutReason() (policy.Reason, string) {
	if s.cut.Load() {
		return policy.ReasonShuttingDown, drainCutDetail
	}
	return "", policy.ReasonClientClosed.String()
}

// connCount counts connections and lets a drain wait for it to reach
// zero.
type connCount struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n reaches 0 while wait waits
}

func (c *connCount) add() {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
}

func (c *connCount) remove() {
	c.mu.Lock()
	if c.n--; c.n == 0 && c.zero != nil {
		close(c.zero)
		c.zero = nil
	}
	c.mu.Unlock()
}

// wait reports whether the count reached zero within d.
func (c *connCount) wait(d time.Duration) bool {
	c.mu.Lock()
	if c.n == 0 {
		c.mu.Unlock()
		return true
	}
	if c.zero == nil {
		c.zero = make(chan struct{})
	}
	zero := c.zero
	c.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-zero:
		return true
	case <-t.C:
		return false
	}
}

// bodyIdleError ends a request whose body, in either direction, moved no
// byte for proxy.body_idle_timeout. It is a timeout (net.Error), so a
// request it ends before the response is refused upstream_timeout, and
// its text names the setting.
type bodyIdleError struct{ after time.Duration }

func (e *bodyIdleError) Error() string {
	return fmt.Sprintf("body idle timeout: no body bytes for %v (proxy.body_idle_timeout)", e.after)
}
func (e *bodyIdleError) Timeout() bool   { return true }
func (e *bodyIdleError) Temporary() bool { return false }
