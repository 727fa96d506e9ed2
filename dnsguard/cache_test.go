package dnsguard

import (
	"fmt"
	"testing"
	"time"
)

func TestCacheBounded(t *testing.T) {
	c := newCache(10)
	now := time.Now()
	fresh := func() *answer { return &answer{ttl: time.Minute, expires: now.Add(time.Minute)} }
	for i := range 5 {
		c.put(fmt.Sprintf("old%d.test", i), &answer{ttl: time.Second, expires: now.Add(time.Second)}, now)
	}
	for i := range 5 {
		c.put(fmt.Sprintf("keep%d.test", i), fresh(), now)
	}
	// Full: the next put drops the expired entries first.
	later := now.Add(2 * time.Second)
	c.put("new.test", fresh(), later)
	if len(c.data) != 6 || c.get("keep0.test", later) == nil || c.get("new.test", later) == nil {
		t.Errorf("after eviction of expired: %d entries; want the 5 fresh ones and new.test", len(c.data))
	}
	for i := range 20 {
		c.put(fmt.Sprintf("more%d.test", i), fresh(), later)
	}
	if len(c.data) > 10 {
		t.Errorf("cache holds %d entries; want at most 10", len(c.data))
	}
	c.put("zero.test", &answer{}, later)
	if c.get("zero.test", later) != nil {
		t.Error("TTL-0 answer was cached")
	}
	if c.get("old0.test", later) != nil {
		t.Error("expired answer returned")
	}
}
