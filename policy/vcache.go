package policy

import (
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// vcache is the per-evaluation cache of rule results (topdown.VirtualCache)
// as a stack of flat lists, pooled between evaluations. OPA's own builds a
// trie of hash maps per evaluation, a quarter of an uncached decision's
// allocations, to hold the handful of rules one decision evaluates. A
// frame stops taking entries at maxVcacheEntries so a bundle that
// evaluates many rules does not pay a linear scan per lookup: a rule that
// is not cached is evaluated again, with the same result.
type vcache struct {
	frames [][]vcacheEntry
	// refs holds copies of the cached refs: topdown passes slices of
	// buffers it goes on to overwrite.
	refs []*ast.Term
}

type vcacheEntry struct {
	ref       ast.Ref
	value     *ast.Term
	undefined bool
}

const maxVcacheEntries = 32

var _ topdown.VirtualCache = (*vcache)(nil)

var vcachePool = sync.Pool{New: func() any {
	return &vcache{frames: [][]vcacheEntry{make([]vcacheEntry, 0, 8)}, refs: make([]*ast.Term, 0, 64)}
}}

func getVcache() *vcache { return vcachePool.Get().(*vcache) }

// put returns c to the pool empty, keeping no terms alive.
func (c *vcache) put() {
	for i := range c.frames {
		clear(c.frames[i])
		c.frames[i] = c.frames[i][:0]
	}
	c.frames = c.frames[:1]
	clear(c.refs)
	c.refs = c.refs[:0]
	vcachePool.Put(c)
}

func (c *vcache) Push() {
	if n := len(c.frames); n < cap(c.frames) {
		c.frames = c.frames[:n+1]
		c.frames[n] = c.frames[n][:0]
		return
	}
	c.frames = append(c.frames, nil)
}

func (c *vcache) Pop() {
	top := c.frames[len(c.frames)-1]
	clear(top)
	c.frames[len(c.frames)-1] = top[:0]
	c.frames = c.frames[:len(c.frames)-1]
}

func (c *vcache) find(ref ast.Ref) *vcacheEntry {
	top := c.frames[len(c.frames)-1]
	for i := range top {
		if top[i].ref.Equal(ref) {
			return &top[i]
		}
	}
	return nil
}

// Get follows topdown's contract: (nil, true) for a cached undefined,
// (value, false) for a cached value, (nil, false) when not cached.
func (c *vcache) Get(ref ast.Ref) (*ast.Term, bool) {
	e := c.find(ref)
	switch {
	case e == nil:
		return nil, false
	case e.undefined:
		return nil, true
	}
	return e.value, false
}

// Put records value, or undefined when value is nil. As in OPA's cache, an
// undefined mark stays once set.
func (c *vcache) Put(ref ast.Ref, value *ast.Term) {
	e := c.find(ref)
	if e == nil {
		n := len(c.frames) - 1
		if len(c.frames[n]) >= maxVcacheEntries {
			return
		}
		start := len(c.refs)
		c.refs = append(c.refs, ref...)
		c.frames[n] = append(c.frames[n], vcacheEntry{ref: c.refs[start:len(c.refs):len(c.refs)]})
		e = &c.frames[n][len(c.frames[n])-1]
	}
	if value == nil {
		e.undefined = true
		return
	}
	e.value = value
}

func (c *vcache) Keys() []ast.Ref {
	var keys []ast.Ref
	for _, e := range c.frames[len(c.frames)-1] {
		if e.value != nil {
			keys = append(keys, e.ref)
		}
	}
	return keys
}
