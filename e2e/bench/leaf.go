package main

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
)

// Leaf certificates of HTTPS inspection (issue 14): a lookup that hits the
// leaf cache and a cold mint, from proxy/ca's own Go benchmarks run pinned
// to the proxy core. A tree without proxy/ca says so in the row.

var leafBenchRe = regexp.MustCompile(`(?m)^Benchmark(LeafCacheHit|LeafColdMint)\S*\s+\d+\s+([\d.]+) ns/op(?:\s+([\d.]+) cpu-ns/op)?`)

func (b *bench) leafWorkloads() []*Workload {
	hit := &Workload{ID: "leaf-hit", Title: "inspection leaf lookup, cache hit", Unit: "µs", LowerIsBetter: true,
		Note: "`go test -run '^$' -bench 'BenchmarkLeaf(CacheHit|ColdMint)' ./proxy/ca`, pinned to the proxy core; CPU from getrusage where the benchmark reports it."}
	mint := &Workload{ID: "leaf-mint", Title: "inspection leaf, cold mint", Unit: "µs", LowerIsBetter: true, Note: hit.Note}
	th, tm := hit.target("egressd", kindEgressd), mint.target("egressd", kindEgressd)
	wls := []*Workload{hit, mint}
	if _, err := os.Stat("proxy/ca"); err != nil {
		th.fail(errUnsupported.Error() + " (no proxy/ca package)")
		tm.fail(errUnsupported.Error() + " (no proxy/ca package)")
		return wls
	}
	args := []string{"go", "test", "-run", "^$", "-bench", "BenchmarkLeaf(CacheHit|ColdMint)$", "-count", "1", "./proxy/ca"}
	if b.o.proxyCPU != "" {
		args = append([]string{"taskset", "-c", b.o.proxyCPU}, args...)
	}
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		th.fail(fmt.Sprintf("error: %v: %s", err, lastLines(string(out), 3)))
		tm.fail(th.Status)
		return wls
	}
	for _, m := range leafBenchRe.FindAllStringSubmatch(string(out), -1) {
		t := th
		if m[1] == "LeafColdMint" {
			t = tm
		}
		ns, _ := strconv.ParseFloat(m[2], 64)
		r := Round{Rate: ns / 1000}
		if m[3] != "" {
			cpu, _ := strconv.ParseFloat(m[3], 64)
			r.CPU = cpu / 1000
		}
		t.Rounds = append(t.Rounds, r)
	}
	for _, wl := range wls {
		if t := wl.Targets[0]; len(t.Rounds) == 0 {
			t.fail("error: no result in: " + lastLines(string(out), 3))
		} else {
			if t.Rounds[0].CPU > 0 {
				wl.CPUUnit = "µs"
			}
			b.progress("%s: %.2f µs", wl.Title, t.rate())
		}
	}
	return wls
}
