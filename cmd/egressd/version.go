package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/egressd/egressd/internal/version"
)

// runVersion is `egressd version [--json]`: the version and commit
// deploy/build.sh stamped, and the Go and pg_query versions the binary was
// built with; the same labels as the egressd_build_info metric.
func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print one JSON object instead of lines")
	helpText{
		synopsis: []string{"version [--json]"},
		about:    "Print the version and commit deploy/build.sh stamped, and the Go and pg_query versions the binary was built with (the labels of the egressd_build_info metric).",
		exit:     "0 printed, 2 usage error",
	}.install(fs)
	pos, err := parseFlags(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErrorf("version takes no arguments, got %q", pos)
	}
	in := version.Get()
	if *asJSON {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode version: %w", err)
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	_, err = fmt.Fprintf(stdout, "egressd %s\ncommit: %s\ngo: %s\npg_query: %s\n",
		in.Version, in.Commit, in.GoVersion, in.PgQueryVersion)
	return err
}
