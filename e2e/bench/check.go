package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The tooling checks of issue 24: one `egressd check` process against
// `egressd version`'s, both run as a user runs them (the whole process,
// wall time, interleaved, pinned to the proxy core), and `check --batch`
// throughput on distinct HTTP requests (so the decision cache answers
// none), on every CPU.

// checkArgs is the single check measured, the issue's own example.
var checkArgs = []string{"check", "http", "GET", "https://pypi.org/simple/"}

func (b *bench) checkWorkloads() []*Workload {
	runs, lines := 20, 200_000
	if b.o.quick {
		runs, lines = 3, 20_000
	}
	single := &Workload{ID: "check", Title: "single check, wall time over `egressd version`'s", Unit: "ms", LowerIsBetter: true,
		Note: fmt.Sprintf("`egressd %s` minus `egressd version`: medians of %d runs of each per round, interleaved, pinned to the proxy core; "+
			"embedded config and bundle, after one check of the bundle under this build (the first runs its Rego tests, see the target's note).", strings.Join(checkArgs, " "), runs)}
	batch := &Workload{ID: "check-batch", Title: "check --batch, distinct HTTP requests", Unit: "decisions/s", CPUUnit: "µs per decision",
		Note: fmt.Sprintf("`egressd check --batch < %d lines` of distinct http requests (allowed and denied hosts), output discarded, every CPU; CPU from getrusage of the process.", lines)}
	ts, tb := single.target("egressd", kindEgressd), batch.target("egressd", kindEgressd)
	wls := []*Workload{single, batch}
	cache := filepath.Join(b.work, "check-cache")
	input := filepath.Join(b.work, "check-batch.jsonl")
	if err := writeCheckLines(input, lines); err != nil {
		ts.fail("error: " + err.Error())
		tb.fail(ts.Status)
		return wls
	}
	// The first check of a bundle under a build runs the bundle's tests.
	cold, _, err := b.timeEgressd(cache, b.o.proxyCPU, nil, checkArgs...)
	if err != nil {
		ts.fail("error: " + err.Error())
		tb.fail(ts.Status)
		return wls
	}
	all := fmt.Sprintf("0-%d", b.res.Machine.NProc-1)
	var checks, versions []float64
	for range b.o.rounds {
		var c, v []float64
		for range runs {
			vt, _, verr := b.timeEgressd(cache, b.o.proxyCPU, nil, "version")
			ct, _, cerr := b.timeEgressd(cache, b.o.proxyCPU, nil, checkArgs...)
			if verr != nil || cerr != nil {
				ts.fail(fmt.Sprintf("error: %v", cmpErr(verr, cerr)))
				break
			}
			v, c = append(v, millis(vt)), append(c, millis(ct))
		}
		if ts.Status == "" {
			checks, versions = append(checks, median(c)), append(versions, median(v))
			ts.Rounds = append(ts.Rounds, Round{Rate: median(c) - median(v)})
		}
		f, err := os.Open(input)
		if err != nil {
			tb.fail("error: " + err.Error())
			continue
		}
		wall, cpu, err := b.timeEgressd(cache, all, f, "check", "--batch")
		f.Close() //nolint:errcheck // opened for reading: nothing to lose
		if err != nil {
			tb.fail("error: " + err.Error())
			continue
		}
		tb.Rounds = append(tb.Rounds, Round{Rate: float64(lines) / wall.Seconds(), CPU: float64(cpu.Microseconds()) / float64(lines)})
	}
	if ts.ok() {
		ts.Note = fmt.Sprintf("medians over rounds: check %.1f ms, version %.1f ms; the first check of this bundle under this build (its Rego tests run): %.0f ms",
			median(checks), median(versions), millis(cold))
		b.progress("%s: %.1f ms (check %.1f ms, version %.1f ms)", single.Title, ts.rate(), median(checks), median(versions))
	}
	if tb.ok() {
		b.progress("%s: %.0f decisions/s, %.1f µs CPU each", batch.Title, tb.rate(), tb.cpu())
	}
	return wls
}

// timeEgressd runs the egressd binary with args on cpus (taskset -c), its
// test ledger under cache, stdin from in, and returns its wall time and
// CPU time. Exit 1 (a deny) is a result, not an error.
func (b *bench) timeEgressd(cache, cpus string, in io.Reader, args ...string) (wall, cpu time.Duration, err error) {
	argv := append([]string{b.egressd}, args...)
	if cpus != "" {
		argv = append([]string{"taskset", "-c", cpus}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+cache)
	cmd.Stdin, cmd.Stdout = in, io.Discard
	start := time.Now()
	err = cmd.Run()
	wall = time.Since(start)
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 {
		err = nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("egressd %s: %w", strings.Join(args, " "), err)
	}
	return wall, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
}

// writeCheckLines writes n distinct http request lines: allowed
// (deb.debian.org) and denied hosts, paths numbered.
func writeCheckLines(path string, n int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	hosts := []string{"deb.debian.org", "security.debian.org", "example.com", "evil.test", "10.0.0.1"}
	for i := range n {
		fmt.Fprintf(w, `{"kind":"http","method":"GET","url":"http://%s/pool/%d/x"}`+"\n", hosts[i%len(hosts)], i)
	}
	if err := w.Flush(); err != nil {
		f.Close() //nolint:errcheck // the write error is the one to report
		return err
	}
	return f.Close()
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
