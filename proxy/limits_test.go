package proxy

import (
	"strconv"
	"testing"
)

// A full limiter table drops its idle entries before it takes a new key,
// and keeps the busy ones: unknown identities cannot grow it without
// bound, and a connection count in progress is not reset.
func TestTrackedTableStaysBounded(t *testing.T) {
	l := newLimiter(DefaultConfig())
	busy := l.get("busy")
	busy.active.Add(1)
	for i := range 3 * maxTrackedIdentities {
		l.get("id-" + strconv.Itoa(i))
	}
	if n := len(l.ids); n > maxTrackedIdentities {
		t.Errorf("limiter tracks %d identities; want at most %d", n, maxTrackedIdentities)
	}
	if l.get("busy") != busy {
		t.Error("an identity with an active connection was dropped")
	}
}
