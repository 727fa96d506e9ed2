package dnsguard

import (
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// Given remembers which addresses the DNS server gave which client for
// which name, so that the transparent listener can ask whether a
// connection's original destination is one egressd's own DNS gave that
// client for the name the connection carries: not a fresh lookup, which
// a client resolving a name itself (or a rebinding nameserver) would pass.
//
// It is bounded per client and overall; an entry lives for its answer's
// TTL, and at least GivenGrace, since clients connect right after a
// zero-TTL answer. When full, a client's soonest-expiring name makes
// room; when the whole table is full and nothing has expired, a new
// answer is not remembered, and connections to it are refused (fail
// closed). No lock is held across I/O: the server remembers after it has
// resolved.
type Given struct {
	mu        sync.Mutex
	clients   map[netip.Addr]map[string]givenEntry
	total     int
	perClient int
	max       int
	now       func() time.Time
}

type givenEntry struct {
	addrs   []netip.Addr
	expires time.Time
}

// GivenGrace is the least time an answer is remembered.
const GivenGrace = 30 * time.Second

// Bounds of one answer kept: the addresses of one name.
const maxGivenAddrs = 32

// NewGiven is an empty memory of at most perClient names per client and
// max names overall. If either is zero, 256 and 65536 are used.
func NewGiven(perClient, max int) *Given {
	if perClient <= 0 {
		perClient = 256
	}
	if max <= 0 {
		max = 65536
	}
	return &Given{clients: make(map[netip.Addr]map[string]givenEntry), perClient: perClient, max: max, now: time.Now}
}

// givenName is the one spelling of a name in the memory: lower case, no
// trailing dot.
func givenName(name string) string {
	return strings.TrimSuffix(strings.ToLower(name), ".")
}

// Remember notes that client was given addrs for name, for ttl (at least
// GivenGrace). Addresses already given for the name and not expired are
// kept: A and AAAA answers come one by one.
func (g *Given) Remember(client netip.Addr, name string, addrs []netip.Addr, ttl time.Duration) {
	if g == nil || len(addrs) == 0 {
		return
	}
	name = givenName(name)
	client = client.Unmap()
	now := g.now()
	expires := now.Add(max(ttl, GivenGrace))
	g.mu.Lock()
	defer g.mu.Unlock()
	names := g.clients[client]
	if names == nil {
		names = make(map[string]givenEntry)
		g.clients[client] = names
	}
	e, ok := names[name]
	if ok && now.After(e.expires) {
		e = givenEntry{}
	}
	if !ok {
		if !g.makeRoom(client, names, now) {
			return
		}
		g.total++
	}
	for _, a := range addrs {
		a = a.Unmap()
		if len(e.addrs) < maxGivenAddrs && !slices.Contains(e.addrs, a) {
			e.addrs = append(e.addrs, a)
		}
	}
	if expires.After(e.expires) {
		e.expires = expires
	}
	names[name] = e
}

// makeRoom frees a slot for a new name of client, reporting whether it
// could: the client's expired names, else its soonest-expiring one when
// it is at its bound; expired names of every client when the table is.
// The caller holds mu.
func (g *Given) makeRoom(client netip.Addr, names map[string]givenEntry, now time.Time) bool {
	if len(names) >= g.perClient {
		soonest := ""
		for n, e := range names {
			if soonest == "" || e.expires.Before(names[soonest].expires) {
				soonest = n
			}
		}
		delete(names, soonest)
		g.total--
	}
	if g.total < g.max {
		return true
	}
	for c, ns := range g.clients {
		for n, e := range ns {
			if now.After(e.expires) {
				delete(ns, n)
				g.total--
			}
		}
		if len(ns) == 0 && c != client {
			delete(g.clients, c)
		}
	}
	return g.total < g.max
}

// Gave reports whether client was given addr for name, in an answer that
// has not expired.
func (g *Given) Gave(client netip.Addr, name string, addr netip.Addr) bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	e, ok := g.clients[client.Unmap()][givenName(name)]
	return ok && !g.now().After(e.expires) && slices.Contains(e.addrs, addr.Unmap())
}
