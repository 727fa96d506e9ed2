package pggate

import (
	"sort"
	"strings"
	"sync"

	"github.com/egressd/egressd/policy"
)

// verdictCache holds the gate's verdicts under the three keys a text has:
// its exact text, its shape (shapeOf) and its normalized form
// (sqlparse.Key). The exact texts are kept apart from the shared
// keys so that a stream of one-off literals cannot evict the shapes. A nil
// *verdictCache caches nothing (postgres.cache_size off, and
// `egressd check sql`).
type verdictCache struct {
	exact, shared *verdictMap
}

// newVerdictCache is a cache of at most max verdicts per kind of key; nil
// when max is not positive.
func newVerdictCache(max int) *verdictCache {
	if max <= 0 {
		return nil
	}
	return &verdictCache{exact: newVerdictMap(max), shared: newVerdictMap(max)}
}

// cacheScope is what every key of one decision shares: who decides (the
// session's identity/database prefix, cacheKeyPrefix), which bundle
// (digest) and which catalog of the database (a new user function changes
// what a call resolves to).
type cacheScope struct{ prefix, digest, catalog string }

// shapeLookup is a text's shape and the verdict cached under it. ok is
// false when the text is outside the shape's subset or nothing is cached;
// cached is nil on a miss.
type shapeLookup struct {
	shape  string
	ok     bool
	cached *verdict
}

// byText is the verdict cached under the exact text.
func (c *verdictCache) byText(sc cacheScope, text string) (*verdict, bool) {
	if c == nil {
		return nil, false
	}
	return c.exact.get(sc.key(keyExact, text))
}

// storeText caches v under the exact text.
func (c *verdictCache) storeText(sc cacheScope, text string, v *verdict) {
	if c != nil {
		c.exact.add(sc.key(keyExact, text), v)
	}
}

// byShape looks text up by its shape. The shape is computed without cgo,
// so a hit saves every call into the parser.
func (c *verdictCache) byShape(sc cacheScope, text string) shapeLookup {
	if c == nil {
		return shapeLookup{}
	}
	var buf [256]byte
	shape, ok := shapeOf(text, buf[:0])
	if !ok {
		return shapeLookup{}
	}
	l := shapeLookup{shape: string(shape), ok: true}
	l.cached, _ = c.shared.get(sc.key(keyShape, l.shape))
	return l
}

// byNormalized is the verdict cached under the normalized form norm; nil
// on a miss.
func (c *verdictCache) byNormalized(sc cacheScope, norm string) *verdict {
	if c == nil {
		return nil
	}
	v, _ := c.shared.get(sc.key(keyNormalized, norm))
	return v
}

// storeNormalized caches v under the normalized form norm.
func (c *verdictCache) storeNormalized(sc cacheScope, norm string, v *verdict) {
	if c != nil {
		c.shared.add(sc.key(keyNormalized, norm), v)
	}
}

// storeShape caches v under the text's shape, but only when the shape is
// what the text's sqlparse.Key, norm, agrees with (see shapeMatches).
func (c *verdictCache) storeShape(sc cacheScope, l shapeLookup, norm string, v *verdict) {
	if c != nil && l.ok && shapeMatches(l.shape, norm) {
		c.shared.add(sc.key(keyShape, l.shape), v)
	}
}

func (sc cacheScope) key(kind keyKind, text string) cacheKey {
	return cacheKey{prefix: sc.prefix, digest: sc.digest, catalog: sc.catalog, text: text, kind: kind}
}

// cacheKeyPrefix identifies who decides: identity id and mode (an
// observing identity's verdicts are not an enforcing one's), attributes in
// key order, and database.
func cacheKeyPrefix(id policy.Identity, db string) string {
	var b strings.Builder
	b.WriteString(id.ID)
	b.WriteByte(0)
	b.WriteString(id.Mode.String())
	b.WriteByte(0)
	keys := make([]string, 0, len(id.Attributes))
	for k := range id.Attributes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(id.Attributes[k])
		b.WriteByte(0)
	}
	b.WriteString(db)
	b.WriteByte(0)
	return b.String()
}

// cacheKey names a verdict without building a string: its scope
// (cacheScope) and the exact query text, its normalized form, or its
// shape.
type cacheKey struct {
	prefix, digest, catalog, text string
	kind                          keyKind
}

// keyKind is what a cacheKey's text is.
type keyKind uint8

const (
	keyExact keyKind = iota
	keyNormalized
	keyShape
)

// verdictMap is a map bounded in entries and in bytes; when either bound
// would be passed it starts over, which keeps every operation O(1) without
// per-entry bookkeeping. An entry bound alone let one identity pin 287 MB
// with 1,000 distinct 60 KB queries (2.8 GB at the default size).
type verdictMap struct {
	mu       sync.RWMutex
	max      int
	maxBytes int
	bytes    int
	m        map[cacheKey]*verdict
}

// Byte bounds of a verdict map: the most one map holds, and the longest
// text it keeps (a longer one is decided each time: its parse costs more
// than the lookup saves, and memory is the scarcer resource).
const (
	cacheMaxBytes     = 32 << 20
	cacheMaxTextBytes = 16 << 10
)

func newVerdictMap(max int) *verdictMap {
	return &verdictMap{max: max, maxBytes: cacheMaxBytes, m: make(map[cacheKey]*verdict, min(max, 1024))}
}

func (c *verdictMap) get(key cacheKey) (*verdict, bool) {
	c.mu.RLock()
	v, ok := c.m[key]
	c.mu.RUnlock()
	return v, ok
}

func (c *verdictMap) add(key cacheKey, v *verdict) {
	if len(key.text) > cacheMaxTextBytes {
		return
	}
	size := entryBytes(key, v)
	c.mu.Lock()
	if len(c.m) >= c.max || c.bytes+size > c.maxBytes {
		clear(c.m)
		c.bytes = 0
	}
	if _, ok := c.m[key]; !ok {
		c.bytes += size
	}
	c.m[key] = v
	c.mu.Unlock()
}

// entryOverhead is what an entry holds besides its strings: the map slot,
// the verdict and its slices' headers, rounded up.
const entryOverhead = 256

// entryBytes is what an entry keeps alive: its key's strings, the
// verdict's audit SQL and rules, and the texts of the objects it creates.
// Strings shared with other entries (the prefix, the digests) are counted
// in each: an over-count only starts the cache over sooner.
func entryBytes(key cacheKey, v *verdict) int {
	n := entryOverhead + len(key.prefix) + len(key.digest) + len(key.catalog) + len(key.text)
	for _, a := range v.stmts {
		n += entryOverhead + len(a.sql) + len(a.fingerprint) + len(a.rule) + len(a.policyID)
	}
	for _, e := range v.effects {
		n += entryOverhead + len(e.name) + len(e.text)
	}
	return n
}
