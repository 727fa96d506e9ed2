package main

import (
	"errors"
	"flag"
	"io"
)

// parseFlags parses fs from args allowing flags after positional arguments
// (`egressd check http GET URL --identity a`), and returns the positionals.
// -h prints the flag set's usage and returns flag.ErrHelp.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) ([]string, error) {
	fs.SetOutput(stderr)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &exitError{code: 2, err: err}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		args = rest
		pos = append(pos, args[0])
		args = args[1:]
	}
}
