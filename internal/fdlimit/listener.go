package fdlimit

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/policy"
)

// Listener refuses new connections (closing them at once, with a reset)
// while its Budget says descriptors are short, and when the process is
// already out of them sheds queued connections the same way instead of
// leaving them to hang in the kernel's queue. The first refusal of each
// episode is audited and logged; the rest are only counted, so a flood
// of refused clients writes one record, not one each.
type Listener struct {
	// Listener is what Accept wraps; its connections are checked.
	net.Listener
	// Raw is the socket under Listener, accepted from directly to shed a
	// connection when accept fails for want of descriptors. If nil,
	// Accept waits for a descriptor instead.
	Raw *net.TCPListener
	// Budget decides. If nil, every connection is admitted.
	Budget *Budget
	// Name is the listener in records and logs ("proxy", "postgres").
	Name string
	// Audit and Log are required.
	Audit audit.Appender
	Log   *zap.Logger
	// Release, if set, is called with each connection from Listener that
	// is refused, before it is closed (the proxy frees its max_conns
	// slot).
	Release func(net.Conn)
	// Refused, if set, is called for each refused connection (a metric).
	Refused func()

	// spare is a descriptor held so that one can be freed to accept and
	// close a connection when there are none left.
	spareOnce sync.Once
	spare     *os.File
	refusing  atomic.Bool
	mu        sync.Mutex
	refused   uint64
}

// Accept returns the next connection the budget admits. It never
// returns a failure for want of descriptors: it sheds a client with the
// spare descriptor, or waits for one to come free (backing off from 5ms
// to 1s), because a server may end on an accept error it does not take
// for temporary.
func (l *Listener) Accept() (net.Conn, error) {
	l.spareOnce.Do(l.openSpare)
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !outOfDescriptors(err) {
				return nil, err
			}
			if l.shed() {
				delay = 0
				continue
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			time.Sleep(delay)
			continue
		}
		if l.Budget == nil || l.Budget.Admit() {
			if l.refusing.Load() {
				l.recovered()
			}
			return c, nil
		}
		l.refuse(c.RemoteAddr())
		if l.Release != nil {
			l.Release(c)
		}
		resetClose(c)
	}
}

// Close closes the listener and the spare descriptor.
func (l *Listener) Close() error {
	err := l.Listener.Close()
	l.mu.Lock()
	if l.spare != nil {
		l.spare.Close() //nolint:errcheck // /dev/null, opened read-only
		l.spare = nil
	}
	l.mu.Unlock()
	return err
}

func (l *Listener) openSpare() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.spare == nil {
		l.spare, _ = os.Open(os.DevNull)
	}
}

// shed frees the spare descriptor, accepts one queued connection with it
// and closes that at once, then takes the spare again. It reports whether
// a connection was shed.
func (l *Listener) shed() bool {
	if l.Raw == nil {
		return false
	}
	l.mu.Lock()
	spare := l.spare
	l.spare = nil
	l.mu.Unlock()
	if spare == nil {
		// Taken on an earlier shed and not yet back: try again for the
		// next one.
		l.openSpare()
		return false
	}
	spare.Close() //nolint:errcheck // /dev/null, opened read-only
	c, err := l.Raw.AcceptTCP()
	if err == nil {
		l.refuse(c.RemoteAddr())
		resetClose(c)
	}
	l.openSpare()
	return err == nil
}

func (l *Listener) refuse(addr net.Addr) {
	if l.Refused != nil {
		l.Refused()
	}
	l.mu.Lock()
	first := !l.refusing.Load()
	l.refusing.Store(true)
	l.refused++
	l.mu.Unlock()
	if !first {
		return
	}
	r := audit.Decided(audit.KindAccept, "", "", audit.Verdict{Reason: policy.ReasonFDExhausted})
	r.Detail = map[string]string{"listener": l.Name}
	if ap, err := netip.ParseAddrPort(addr.String()); err == nil {
		r.Client = ap.Addr().Unmap().String()
	}
	limit, reserve, open := 0, 0, 0
	if l.Budget != nil {
		limit, reserve, open = l.Budget.Limit(), l.Budget.Reserve(), l.Budget.Open()
		r.Detail["limit"], r.Detail["reserve"], r.Detail["open"] = strconv.Itoa(limit), strconv.Itoa(reserve), strconv.Itoa(open)
	}
	if err := l.Audit.Append(r); err != nil {
		l.Log.Error("audit append failed", zap.String("listener", l.Name), zap.Error(err))
	}
	l.Log.Warn("file descriptors short: refusing new clients until enough are free (the next refusals are counted, not audited)",
		zap.String("listener", l.Name), zap.Int("open", open), zap.Int("limit", limit), zap.Int("reserve", reserve))
}

func (l *Listener) recovered() {
	l.mu.Lock()
	was, n := l.refusing.Load(), l.refused
	l.refusing.Store(false)
	l.refused = 0
	l.mu.Unlock()
	if was {
		l.Log.Info("file descriptors available again: admitting new clients", zap.String("listener", l.Name), zap.Uint64("refused", n))
	}
}

func outOfDescriptors(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// resetClose closes c with a reset, so that the client learns at once.
func resetClose(c net.Conn) {
	if l, ok := c.(interface{ SetLinger(int) error }); ok {
		_ = l.SetLinger(0) // best effort: without it the close is an orderly FIN
	}
	c.Close()
}

// Spare wraps a listener that must keep answering when the process is out
// of descriptors (the admin listener, for /readyz and reload): when accept
// fails for want of them, it frees a descriptor it holds in reserve and
// accepts into that one. It takes the spare again on a later accept.
type Spare struct {
	net.Listener

	mu    sync.Mutex
	spare *os.File
}

// NewSpare wraps ln and takes its spare descriptor.
func NewSpare(ln net.Listener) *Spare {
	s := &Spare{Listener: ln}
	s.refill()
	return s
}

// Accept returns the next connection, into the spare descriptor if need be.
func (s *Spare) Accept() (net.Conn, error) {
	c, err := s.Listener.Accept()
	if err == nil || !outOfDescriptors(err) {
		if err == nil {
			s.refill()
		}
		return c, err
	}
	s.mu.Lock()
	spare := s.spare
	s.spare = nil
	s.mu.Unlock()
	if spare == nil {
		return nil, err
	}
	spare.Close() //nolint:errcheck // /dev/null, opened read-only
	return s.Listener.Accept()
}

// Close closes the listener and the spare descriptor.
func (s *Spare) Close() error {
	err := s.Listener.Close()
	s.mu.Lock()
	if s.spare != nil {
		s.spare.Close() //nolint:errcheck // /dev/null, opened read-only
		s.spare = nil
	}
	s.mu.Unlock()
	return err
}

func (s *Spare) refill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.spare == nil {
		s.spare, _ = os.Open(os.DevNull)
	}
}
