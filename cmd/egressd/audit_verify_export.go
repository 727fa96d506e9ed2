package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/export"
)

// fileList collects a repeated file flag.
type fileList []string

func (f *fileList) String() string { return strings.Join(*f, ",") }

func (f *fileList) Set(s string) error {
	if s == "" {
		return errors.New("want a file name")
	}
	*f = append(*f, s)
	return nil
}

// verifyExported checks exported streams (--ocsf, --otlp-json files), all
// replicas' chains together, and prints one line per chain. It reports
// whether every chain was intact.
func verifyExported(stdout io.Writer, ocsf, otlpJSON []string) (bool, error) {
	v := export.NewVerifier()
	read := func(files []string, fn func(io.Reader, *export.Verifier) error) error {
		for _, p := range files {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			err = fn(f, v)
			f.Close() //nolint:errcheck // opened read-only: Close cannot lose data
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
		return nil
	}
	if err := read(ocsf, export.ReadOCSF); err != nil {
		return false, err
	}
	if err := read(otlpJSON, export.ReadOTLPJSON); err != nil {
		return false, err
	}
	if v.Err != nil {
		return false, v.Err
	}
	reps := v.Reports()
	if len(reps) == 0 {
		return false, errors.New("no exported events in the files given")
	}
	for _, r := range reps {
		name := fmt.Sprintf("replica %s chain %s", r.Replica, short(r.Chain))
		if r.Err != nil {
			fmt.Fprintf(stdout, "%s: broken: %v\n", name, r.Err)
			continue
		}
		fmt.Fprintf(stdout, "%s: ok: %d records (seq 1..%d), %d repeated deliveries skipped\n", name, r.Records, r.Head, r.Repeats)
	}
	return v.Ok(), nil
}

func short(h string) string {
	if len(h) > 16 {
		return h[:16]
	}
	return h
}

// verifyReplicas verifies each directory as its own replica's log and
// prints one line per directory; it reports whether all were intact.
func verifyReplicas(stdout io.Writer, dirs []string, mk func() *audit.Verifier) (bool, error) {
	ok := true
	for _, d := range dirs {
		v := mk()
		err := v.Paths([]string{d})
		var be *audit.BreakError
		switch {
		case errors.As(err, &be):
			fmt.Fprintf(stdout, "%s: broken: %v\n", d, be)
			ok = false
		case err != nil:
			return false, fmt.Errorf("%s: %w", d, err)
		default:
			seq, head := v.Head()
			fmt.Fprintf(stdout, "%s: ok: %d records, %d segments; head seq %d hash %s\n", d, v.Counts.Records, v.Counts.Segments, seq, head)
		}
	}
	return ok, nil
}

// allDirs reports whether paths are two or more directories: replicas'
// logs, verified one by one, rather than the files of one log.
func allDirs(paths []string) bool {
	if len(paths) < 2 {
		return false
	}
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil || !fi.IsDir() {
			return false
		}
	}
	return true
}
