package sqlparse

import (
	"context"
	"fmt"
	"sync"
)

// identityKey is WithIdentity's context key.
type identityKey struct{}

// WithIdentity returns ctx carrying id, the identity (sandbox) a parse is
// for. The worker pool queues parses per identity and serves identities in
// turn, so one identity's deep texts cannot keep another's waiting. Parses
// without an identity share the queue of "".
func WithIdentity(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

func identityOf(ctx context.Context) string {
	id, _ := ctx.Value(identityKey{}).(string)
	return id
}

// slots grants the pool's n worker slots fairly: each identity has its own
// FIFO queue, a free slot goes to the waiting identity served least
// recently, and no identity holds more than perIdentity slots at once, so
// with two or more workers one is always left for the others: a flood of
// 1 MiB texts from one sandbox made another's 36 KB text wait 18.6 s when
// the slots were first come, first served.
type slots struct {
	n, perIdentity int

	mu   sync.Mutex
	busy int
	ids  map[string]*identityQueue
	// tick counts grants (identityQueue.last), arrivals the waiters
	// (waiter.seq): between identities equally recently served, the one
	// whose head waiter came first goes first.
	tick, arrivals uint64
}

// identityQueue is one identity's share: kept while it waits or holds.
type identityQueue struct {
	waiting []*waiter
	held    int
	last    uint64 // tick of its last grant; 0 if none since it was idle
}

type waiter struct {
	ready   chan struct{} // closed when granted
	seq     uint64
	granted bool
}

func newSlots(n int) *slots {
	return &slots{n: n, perIdentity: max(1, n-1), ids: make(map[string]*identityQueue)}
}

// acquire waits for a slot for id; a nil error means the caller holds one
// and must release it.
func (s *slots) acquire(ctx context.Context, id string) error {
	return s.wait(ctx, id, s.enqueue(id))
}

// enqueue queues a waiter for id and grants what is free.
func (s *slots) enqueue(id string) *waiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.arrivals++
	w := &waiter{ready: make(chan struct{}), seq: s.arrivals}
	q := s.ids[id]
	if q == nil {
		q = &identityQueue{}
		s.ids[id] = q
	}
	q.waiting = append(q.waiting, w)
	s.dispatch()
	return w
}

// wait waits until w is granted or ctx ends; a waiter that leaves takes
// itself out of the queue, or hands on the slot it was granted meanwhile.
func (s *slots) wait(ctx context.Context, id string, w *waiter) error {
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	if w.granted {
		s.mu.Unlock()
		s.release(id)
		return fmt.Errorf("wait for a parser: %w", ctx.Err())
	}
	q := s.ids[id]
	for i, o := range q.waiting {
		if o == w {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			break
		}
	}
	s.forget(id, q)
	s.mu.Unlock()
	return fmt.Errorf("wait for a parser: %w", ctx.Err())
}

// release returns id's slot and hands it on.
func (s *slots) release(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.ids[id]
	q.held--
	s.busy--
	s.forget(id, q)
	s.dispatch()
}

// dispatch grants free slots, each to the head waiter of the identity
// under its cap that was served least recently. Callers hold mu. The scan
// is over the identities with work in flight: a handful of sandboxes.
func (s *slots) dispatch() {
	for s.busy < s.n {
		var next *identityQueue
		for _, q := range s.ids {
			if len(q.waiting) == 0 || q.held >= s.perIdentity {
				continue
			}
			if next == nil || q.last < next.last || q.last == next.last && q.waiting[0].seq < next.waiting[0].seq {
				next = q
			}
		}
		if next == nil {
			return
		}
		w := next.waiting[0]
		next.waiting[0] = nil
		next.waiting = next.waiting[1:]
		s.tick++
		next.last = s.tick
		next.held++
		s.busy++
		w.granted = true
		close(w.ready)
	}
}

// forget drops id's state once it neither waits nor holds. Callers hold
// mu.
func (s *slots) forget(id string, q *identityQueue) {
	if len(q.waiting) == 0 && q.held == 0 {
		delete(s.ids, id)
	}
}
