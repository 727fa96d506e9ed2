package policy

import "sync"

// maxCachedKey bounds the keys the cache keeps: decisions on very long
// paths are rare and would let one client fill memory with key bytes.
const maxCachedKey = 2048

// lru is a bounded least-recently-used decision cache. It is written by
// hand rather than taken from a library so that a lookup by []byte key
// does not allocate (the map index converts without copying).
type lru struct {
	mu   sync.Mutex
	max  int
	m    map[string]*lruEntry
	root lruEntry // sentinel: root.next is the most recent entry
}

type lruEntry struct {
	key        string
	d          Decision
	prev, next *lruEntry
}

// newLRU returns a cache of max entries, or nil (no caching) if max <= 0.
func newLRU(max int) *lru {
	if max <= 0 {
		return nil
	}
	c := &lru{max: max, m: make(map[string]*lruEntry, min(max, 1024))}
	c.root.next, c.root.prev = &c.root, &c.root
	return c
}

func (c *lru) get(key []byte) (Decision, bool) {
	if c == nil {
		return Decision{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[string(key)]
	if !ok {
		return Decision{}, false
	}
	c.unlink(e)
	c.pushFront(e)
	return e.d, true
}

func (c *lru) add(key []byte, d Decision) {
	if c == nil || len(key) > maxCachedKey {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[string(key)]; ok {
		e.d = d
		c.unlink(e)
		c.pushFront(e)
		return
	}
	var e *lruEntry
	if len(c.m) >= c.max {
		// Reuse the evicted entry: a full cache churns without garbage.
		e = c.root.prev
		c.unlink(e)
		delete(c.m, e.key)
	} else {
		e = new(lruEntry)
	}
	e.key, e.d = string(key), d
	c.m[e.key] = e
	c.pushFront(e)
}

func (c *lru) len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

func (c *lru) unlink(e *lruEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
}

func (c *lru) pushFront(e *lruEntry) {
	e.prev, e.next = &c.root, c.root.next
	c.root.next.prev = e
	c.root.next = e
}
