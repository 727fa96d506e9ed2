package proxy

import (
	"maps"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egressd/egressd/policy"
	"golang.org/x/time/rate"
)

// maxTrackedIdentities bounds the per-identity limiter table; past it the
// idle entries are dropped so unknown ids cannot grow it without bound.
const maxTrackedIdentities = 4096

// limiter holds per-identity token buckets and in-flight counters.
type limiter struct {
	rate    rate.Limit
	burst   int
	maxConc int64

	mu  sync.Mutex
	ids map[string]*idLimit
}

type idLimit struct {
	bucket *rate.Limiter
	active atomic.Int64
}

func newLimiter(c Config) *limiter {
	return &limiter{
		rate:    rate.Limit(c.PerIdentityRate),
		burst:   c.PerIdentityBurst,
		maxConc: int64(c.PerIdentityMaxConns),
		ids:     make(map[string]*idLimit),
	}
}

func (l *limiter) get(id string) *idLimit {
	l.mu.Lock()
	defer l.mu.Unlock()
	return tracked(l.ids, id,
		func(e *idLimit) bool { return e.active.Load() == 0 },
		func() *idLimit { return &idLimit{bucket: rate.NewLimiter(l.rate, l.burst)} })
}

// tracked returns m[k], adding fresh() when it is missing. A table at
// maxTrackedIdentities first drops the entries idle reports unused, so
// that unknown keys cannot grow it without bound.
func tracked[K comparable, V any](m map[K]V, k K, idle func(V) bool, fresh func() V) V {
	v, ok := m[k]
	if !ok {
		if len(m) >= maxTrackedIdentities {
			maps.DeleteFunc(m, func(_ K, v V) bool { return idle(v) })
		}
		v = fresh()
		m[k] = v
	}
	return v
}

// acquire admits one request or tunnel of id. It returns a release func, or
// the refusal reason.
func (l *limiter) acquire(id string) (func(), policy.Reason) {
	e := l.get(id)
	if !e.bucket.Allow() {
		return nil, policy.ReasonRateLimited
	}
	if e.active.Add(1) > l.maxConc {
		e.active.Add(-1)
		return nil, policy.ReasonIdentityConnLimit
	}
	return func() { e.active.Add(-1) }, ""
}

// sourceLimiter meters refusals before authentication per client
// address: a client without valid credentials costs a decision and a
// record per request, so its pace is bounded before the identity limits
// (which need an identity) can apply.
type sourceLimiter struct {
	rate  rate.Limit
	burst int

	mu  sync.Mutex
	ids map[netip.Addr]*rate.Limiter
}

func newSourceLimiter(c Config) *sourceLimiter {
	return &sourceLimiter{rate: rate.Limit(c.PerSourceRefusalRate), burst: c.PerSourceRefusalBurst,
		ids: make(map[netip.Addr]*rate.Limiter)}
}

// exhausted reports whether a has no refusals left to spend.
func (l *sourceLimiter) exhausted(a netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.ids[a]
	return ok && b.Tokens() < 1
}

// refused charges a refusal to a.
func (l *sourceLimiter) refused(a netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	tracked(l.ids, a,
		func(b *rate.Limiter) bool { return b.Tokens() >= float64(l.burst) },
		func() *rate.Limiter { return rate.NewLimiter(l.rate, l.burst) }).Allow()
}

// capListener closes connections accepted past the global cap and wraps the
// rest in a clientConn (a tunnel unwraps it again, so it can still splice);
// the slot is released by the server's ConnState hook or, for a hijacked
// connection, by the tunnel when it ends.
type capListener struct {
	*net.TCPListener
	active   *atomic.Int64
	max      int64
	rejected func()
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.AcceptTCP()
		if err != nil {
			return nil, err
		}
		if l.active.Add(1) > l.max {
			l.active.Add(-1)
			c.SetLinger(0)
			c.Close()
			l.rejected()
			continue
		}
		c.SetKeepAlivePeriod(30 * time.Second)
		c.SetKeepAlive(true)
		return &clientConn{TCPConn: c}, nil
	}
}
