package dnsguard

import (
	"net/netip"
	"sync"

	"golang.org/x/time/rate"
)

// maxClients bounds the limiter table. Sandboxes have stable addresses, so
// far fewer are expected; past the bound the table is cleared rather than
// grown, which resets every client's budget once.
const maxClients = 1 << 16

// limiter is a per-client token bucket.
type limiter struct {
	mu      sync.Mutex
	limit   rate.Limit
	burst   int
	clients map[netip.Addr]*rate.Limiter
}

func newLimiter(perSecond float64, burst int) *limiter {
	return &limiter{limit: rate.Limit(perSecond), burst: burst, clients: map[netip.Addr]*rate.Limiter{}}
}

func (l *limiter) allow(client netip.Addr) bool {
	l.mu.Lock()
	lim := l.clients[client]
	if lim == nil {
		if len(l.clients) >= maxClients {
			clear(l.clients)
		}
		lim = rate.NewLimiter(l.limit, l.burst)
		l.clients[client] = lim
	}
	l.mu.Unlock()
	return lim.Allow()
}
