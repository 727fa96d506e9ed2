package proxy

import (
	"net"
	"sync"
	"time"
)

// readyWaiter holds the tunnel directions that have nothing to read. An
// idle tunnel is parked here instead of in two goroutines blocked on a
// read: at 5,000 idle tunnels those goroutines' stacks were most of the
// process's memory.
type readyWaiter interface {
	// park runs wake once, on a goroutine of its own, when c is readable
	// (bytes, an EOF or an error) or when kick is called, whichever is
	// first. kick may be called any number of times, also after wake ran.
	park(c net.Conn, wake func()) (kick func())
}

// parkedWaiter is the process's one readyWaiter: an epoll instance on
// Linux (readywait_linux.go), a goroutine per parked direction elsewhere
// or when epoll is unavailable.
var parkedWaiter = sync.OnceValue(newReadyWaiter)

// goroutineWaiter parks each direction in a goroutine of its own, blocked
// until c is readable: the waiter of last resort, costing what a blocked
// read costs but no buffer.
type goroutineWaiter struct{}

// longAgo is a deadline in the past: setting it wakes a blocked wait.
var longAgo = time.Unix(1, 0)

func (goroutineWaiter) park(c net.Conn, wake func()) func() {
	// Cleared before the goroutine starts, so that a kick's deadline is
	// never overwritten.
	c.SetReadDeadline(time.Time{})
	go func() {
		_ = waitReadable(c) // ready, closed or kicked: wake looks for itself
		wake()
	}()
	return func() { c.SetReadDeadline(longAgo) }
}
