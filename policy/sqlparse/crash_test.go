package sqlparse

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sort"
	"testing"

	"github.com/egressd/egressd/policy/sqlparse/deepsql"
)

var crashPoints = flag.Bool("crashpoints", false, "measure where each deep construct crashes the worker and print the table")

var opNames = map[op]string{opJSON: "json", opProtobuf: "protobuf", opFingerprint: "fingerprint"}

// crashes runs o on text in a fresh worker and reports whether it crashed.
func crashes(t testing.TB, o op, text string) bool {
	t.Helper()
	w, err := startWorker()
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.do(context.Background(), o, text)
	w.kill()
	if errors.Is(err, ErrTooLarge) {
		t.Fatalf("%s of %d bytes: %v", opNames[o], len(text), err)
	}
	return errors.Is(err, ErrCrashed)
}

// levelsOf is Levels of text's tokens.
func levelsOf(t testing.TB, text string) int {
	t.Helper()
	toks, err := Scan(text)
	if err != nil {
		t.Fatalf("Scan(%.40q…) = %v", text, err)
	}
	return Levels(toks)
}

// largestShallow is the largest n whose text is parsed in-process.
func largestShallow(c deepsql.Construct) int {
	lo, hi := 0, c.MaxN(1<<20)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if InProcess(c.Text(mid)) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// TestInProcessBoundBelowCrashes parses, in a worker, the largest text of
// every deep construct that the bound would parse in-process, with every
// operation: none may crash, or the bound is not safe. With -crashpoints it
// also measures where each construct does crash (smallest crashing n, by
// bisection) and prints the table quoted in sqlparse.go.
func TestInProcessBoundBelowCrashes(t *testing.T) {
	if InProcessLevels != inProcessLevels8MiB {
		t.Fatalf("InProcessLevels = %d; want %d (run with an 8 MiB stack limit, ulimit -s 8192)", InProcessLevels, inProcessLevels8MiB)
	}
	type row struct {
		name, op     string
		n, levels, b int
	}
	var table []row
	for _, c := range deepsql.Constructs {
		n := largestShallow(c)
		text := c.Text(n)
		for _, o := range []op{opJSON, opProtobuf, opFingerprint} {
			if crashes(t, o, text) {
				t.Errorf("%s × %d (%d levels) crashes %s: the in-process bound is not safe", c.Name, n, levelsOf(t, text), opNames[o])
			}
			if !*crashPoints {
				continue
			}
			top := c.MaxN(1 << 20)
			if !crashes(t, o, c.Text(top)) {
				continue
			}
			lo, hi := n, top // lo does not crash, hi does
			for hi-lo > max(1, lo/20) {
				mid := lo + (hi-lo)/2
				if crashes(t, o, c.Text(mid)) {
					hi = mid
				} else {
					lo = mid
				}
			}
			s := c.Text(hi)
			table = append(table, row{c.Name, opNames[o], hi, levelsOf(t, s), len(s)})
		}
	}
	if *crashPoints {
		sort.Slice(table, func(i, j int) bool { return table[i].levels < table[j].levels })
		for _, r := range table {
			fmt.Printf("%-18s %-12s n=%-8d levels=%-8d bytes=%d\n", r.name, r.op, r.n, r.levels, r.b)
		}
	}
}
