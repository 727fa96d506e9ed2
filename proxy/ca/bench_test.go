package ca

import (
	"strconv"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user+system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds cpu-ns/op: on a shared machine wall time per op swings
// with the load, CPU time per op much less.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
}

// BenchmarkLeafCacheHit is a Leaf call for a (identity, host) already
// cached: the cost of every inspected CONNECT after the first. Target
// (issue 14): at most 5 µs.
func BenchmarkLeafCacheHit(b *testing.B) {
	a, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := a.Leaf("sandbox-a", "api.github.com"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	start := cpuTime(b)
	for b.Loop() {
		if _, err := a.Leaf("sandbox-a", "api.github.com"); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, start)
}

// BenchmarkLeafColdMint is a Leaf call for a host not cached (the root
// exists): a fresh key and a signature. Target (issue 14): at most 1 ms.
func BenchmarkLeafColdMint(b *testing.B) {
	a, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := a.Root("sandbox-a"); err != nil {
		b.Fatal(err)
	}
	hosts := make([]string, 0, 1024)
	for i := range cap(hosts) {
		hosts = append(hosts, "h"+strconv.Itoa(i)+".example.com")
	}
	b.ReportAllocs()
	start := cpuTime(b)
	i := 0
	for b.Loop() {
		// A cache of one leaf and a host that changes every call: each
		// call mints.
		a.cache = newLRU(1)
		if _, err := a.Leaf("sandbox-a", hosts[i%len(hosts)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	reportCPU(b, start)
	if s := a.Stats(); s.Hits != 0 {
		b.Fatalf("%d cache hits in a cold-mint benchmark", s.Hits)
	}
}
