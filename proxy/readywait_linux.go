package proxy

import (
	"errors"
	"net"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// epollWaiter parks directions in an epoll instance of its own, waited on
// by one goroutine for the whole process (loop): Go's runtime poller has
// no way to wait for readiness without a goroutine per wait.
//
// Each park registers the socket level-triggered and one-shot, under a
// token that is never reused: bytes already queued fire at once, a fired
// registration stays disabled until the next park re-arms it, and an
// event for a socket closed and its number reused since carries a token
// that is gone and is ignored. The kernel drops a registration when the
// socket closes, so nothing is ever deleted by number (which could name
// another socket by then); every epoll_ctl runs inside the connection's
// own Control, while its descriptor is known open.
type epollWaiter struct {
	epfd int

	mu     sync.Mutex
	next   uint64
	parked map[uint64]func()
	// broken is set if epoll_wait ever fails for a reason other than a
	// signal: every direction parks in a goroutine from then on.
	broken bool
}

func newReadyWaiter() readyWaiter {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return goroutineWaiter{}
	}
	w := &epollWaiter{epfd: epfd, parked: make(map[uint64]func())}
	go w.loop()
	return w
}

func (w *epollWaiter) park(c net.Conn, wake func()) func() {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return goroutineWaiter{}.park(c, wake)
	}
	w.mu.Lock()
	if w.broken {
		w.mu.Unlock()
		return goroutineWaiter{}.park(c, wake)
	}
	w.next++
	tok := w.next
	w.parked[tok] = wake
	w.mu.Unlock()
	kick := func() { w.fire(tok) }
	rc, err := sc.SyscallConn()
	if err != nil {
		kick()
		return kick
	}
	var ctlErr error
	err = rc.Control(func(fd uintptr) {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT,
			Fd: int32(uint32(tok)), Pad: int32(uint32(tok >> 32))}
		ctlErr = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_MOD, int(fd), &ev)
		if errors.Is(ctlErr, unix.ENOENT) {
			ctlErr = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
		}
	})
	if err != nil || ctlErr != nil {
		// Closed meanwhile, or not a socket epoll takes: the direction
		// runs and finds out for itself.
		kick()
	}
	return kick
}

// fire runs the wake parked under tok, if it has not run yet.
func (w *epollWaiter) fire(tok uint64) {
	w.mu.Lock()
	wake, ok := w.parked[tok]
	delete(w.parked, tok) // a nil map once broken: a no-op
	w.mu.Unlock()
	if ok {
		go wake()
	}
}

// loop waits for the parked sockets for as long as the process runs.
func (w *epollWaiter) loop() {
	events := make([]unix.EpollEvent, 256)
	for {
		n, err := unix.EpollWait(w.epfd, events, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			// Not expected with these arguments; wake every parked
			// direction rather than leave one waiting for ever.
			w.mu.Lock()
			w.broken = true
			parked := w.parked
			w.parked = nil
			w.mu.Unlock()
			for _, wake := range parked {
				go wake()
			}
			return
		}
		for _, ev := range events[:n] {
			w.fire(uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32)
		}
		// Let the directions just woken run before waking more: when
		// thousands of tunnels end at once, their goroutines should not
		// all exist at the same time.
		runtime.Gosched()
	}
}
