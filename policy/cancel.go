package policy

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// evalCancel stops one evaluation at the eval timeout or when the caller's
// context ends. It is passed to OPA as the external cancel: without one,
// OPA starts a goroutine per evaluation to watch the context, which costs
// more than the rest of a cached-bundle evaluation's overhead. The timer
// is made once and reset per evaluation, so an evaluation that finishes in
// time allocates nothing here.
type evalCancel struct {
	cancelled atomic.Bool
	timedOut  atomic.Bool
	timer     *time.Timer
}

func (c *evalCancel) Cancel()         { c.cancelled.Store(true) }
func (c *evalCancel) Cancelled() bool { return c.cancelled.Load() }

func (c *evalCancel) timeout() {
	c.timedOut.Store(true)
	c.Cancel()
}

var cancelPool = sync.Pool{New: func() any {
	c := &evalCancel{}
	c.timer = time.AfterFunc(time.Hour, c.timeout)
	c.timer.Stop()
	return c
}}

// newEvalCancel arms a cancel for one evaluation; release disarms it.
func newEvalCancel(ctx context.Context, timeout time.Duration) (c *evalCancel, stopCtx func() bool) {
	c = cancelPool.Get().(*evalCancel)
	c.timer.Reset(timeout)
	if ctx.Done() != nil {
		stopCtx = context.AfterFunc(ctx, c.Cancel)
	}
	return c, stopCtx
}

// release disarms c and reports whether the evaluation timed out. A timer
// or context callback that already ran (or is running) could still cancel
// a later evaluation, so such a cancel is dropped rather than reused.
func (c *evalCancel) release(stopCtx func() bool) (timedOut bool) {
	reusable := c.timer.Stop()
	if stopCtx != nil && !stopCtx() {
		reusable = false
	}
	timedOut = c.timedOut.Load()
	if reusable {
		cancelPool.Put(c)
	}
	return timedOut
}
