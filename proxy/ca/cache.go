package ca

import (
	"container/list"
	"crypto/tls"
	"time"
)

// leafKey identifies a cached leaf.
type leafKey struct{ identity, host string }

// leafEntry is a cached leaf and the time it stops being handed out.
type leafEntry struct {
	key     leafKey
	cert    *tls.Certificate
	refresh time.Time
}

// lru is a bounded least-recently-used map of leaves. It is not safe for
// concurrent use; Authority guards it with its mutex.
type lru struct {
	max   int
	order *list.List // front: most recently used; values are *leafEntry
	byKey map[leafKey]*list.Element
}

func newLRU(max int) *lru {
	return &lru{max: max, order: list.New(), byKey: make(map[leafKey]*list.Element, min(max, 1024))}
}

// get returns k's entry and marks it used.
func (c *lru) get(k leafKey) (*leafEntry, bool) {
	el, ok := c.byKey[k]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*leafEntry), true
}

// add stores e, replacing an entry with its key, and drops the least
// recently used entry past the bound.
func (c *lru) add(e *leafEntry) {
	if el, ok := c.byKey[e.key]; ok {
		el.Value = e
		c.order.MoveToFront(el)
		return
	}
	c.byKey[e.key] = c.order.PushFront(e)
	if c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byKey, last.Value.(*leafEntry).key)
	}
}

func (c *lru) len() int { return c.order.Len() }
