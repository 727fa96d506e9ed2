package dnsguard

import (
	"net/netip"
	"sync"
	"time"
)

// answer is the outcome of resolving one name: the vetted addresses, or the
// error every caller gets. Cached answers are shared and never modified.
type answer struct {
	addrs []netip.Addr
	// chain holds the CNAME targets followed from the name, in order.
	chain []string
	// rcode is the upstream's final rcode (NXDOMAIN is kept so the sandbox
	// server can say so).
	rcode int
	err   error
	// ttl is the clamped time to live; expires is when it runs out.
	ttl     time.Duration
	expires time.Time
}

// cache is a bounded TTL map. Lookups take only a read lock and never touch
// the network; fills happen after the lookup, outside any lock.
type cache struct {
	mu   sync.RWMutex
	max  int
	data map[string]*answer
}

func newCache(max int) *cache {
	return &cache{max: max, data: make(map[string]*answer)}
}

func (c *cache) get(name string, now time.Time) *answer {
	c.mu.RLock()
	a := c.data[name]
	c.mu.RUnlock()
	if a == nil || !now.Before(a.expires) {
		return nil
	}
	return a
}

func (c *cache) put(name string, a *answer, now time.Time) {
	if a.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.data[name]; !ok && len(c.data) >= c.max {
		c.evict(now)
	}
	c.data[name] = a
}

// evict drops expired entries, and if that frees nothing, an arbitrary
// tenth: the cache is a shield for upstreams, not a store that must keep
// every name.
func (c *cache) evict(now time.Time) {
	for k, a := range c.data {
		if !now.Before(a.expires) {
			delete(c.data, k)
		}
	}
	if len(c.data) < c.max {
		return
	}
	n := c.max/10 + 1
	for k := range c.data {
		if n == 0 {
			break
		}
		delete(c.data, k)
		n--
	}
}

func (c *cache) clear() {
	c.mu.Lock()
	clear(c.data)
	c.mu.Unlock()
}
