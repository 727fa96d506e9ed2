package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
)

// parseOnce is fs.Parse(args) with the usage text sent where the user
// looks for it: to stdout when they asked for it (-h, --help), so it can be
// paged or searched, to stderr after a flag error. A flag error is a usage
// error (exit 2); a help request returns flag.ErrHelp (exit 0).
func parseOnce(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var text bytes.Buffer
	usage := fs.Usage
	if usage == nil {
		usage = fs.PrintDefaults
	}
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fs.SetOutput(&text)
		defer fs.SetOutput(stderr)
		usage()
	}
	defer func() { fs.Usage = usage }()
	err := fs.Parse(args)
	if err == nil {
		return nil
	}
	w := stderr
	if errors.Is(err, flag.ErrHelp) {
		w = stdout
	} else {
		err = &exitError{code: 2, err: err}
	}
	if _, werr := w.Write(text.Bytes()); werr != nil {
		return fmt.Errorf("write usage: %w", werr)
	}
	return err
}

// parseFlags parses fs from args allowing flags after positional arguments
// (`egressd check http GET URL --identity a`), and returns the positionals.
// -h prints the flag set's usage to stdout and returns flag.ErrHelp.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) ([]string, error) {
	var pos []string
	for {
		if err := parseOnce(fs, args, stdout, stderr); err != nil {
			return nil, err
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
