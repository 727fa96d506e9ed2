// This file only dispatches subcommands and turns their errors into exit
// codes; the work lives in the packages.

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/egressd/egressd/policy/sqlparse"
)

// command is one subcommand. It returns nil for success, errDenied for a
// deny (exit 1), or any other error (exit 2 unless it carries its own code).
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

// commands lists the subcommands; each lives in its own file.
var commands = map[string]command{
	"health":   {summary: "exit 0 if the admin listener reports ready, else 1", run: runHealth},
	"serve":    {summary: "run the proxy, admin, and configured DNS and Postgres listeners", run: runServe},
	"check":    {summary: "decide one request offline, exactly as the listeners would", run: runCheck},
	"policy":   {summary: "start (init), compile (check) or test (test) a policy bundle", run: runPolicy},
	"audit":    {summary: "verify the audit log's hash chain, or show its records", run: runAudit},
	"grant":    {summary: "let an identity through for a while: from a denied request, or one method and URL; list, revoke", run: runGrant},
	"identity": {summary: "hash a sandbox secret into an identities: entry", run: runIdentity},
	"ca":       {summary: "create a CA directory (init) or export an identity's root for its sandbox (export)", run: runCA},
	"version":  {summary: "print the version, commit, Go and pg_query versions", run: runVersion},
}

func main() {
	// First: in a re-run of this binary as a SQL parser worker, this
	// serves and exits.
	sqlparse.EnableWorkers()
	os.Exit(exitCode(run(os.Args[1:], os.Stdout, os.Stderr), os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) error {
	switch {
	case len(args) == 0:
		usage(stderr)
		return usageErrorf("missing subcommand")
	case args[0] == "-h" || args[0] == "--help" || args[0] == "help":
		// Asked for: to stdout, where a pager or grep finds it.
		usage(stdout)
		return nil
	case args[0] == "--version" || args[0] == "-version":
		return runVersion(args[1:], stdout, stderr)
	}
	cmd, ok := commands[args[0]]
	if !ok {
		usage(stderr)
		return usageErrorf("unknown subcommand %q", args[0])
	}
	return cmd.run(args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	helpText{
		synopsis:     []string{"<command> [flags] [args]"},
		about:        "egressd is the egress gate of AI-agent sandboxes. Run 'egressd <command> -h' for a command's arguments, flags and exit status.",
		actions:      table(commands, func(c command) string { return c.summary }),
		actionsTitle: "commands",
		exit:         "each command's own (see its -h); 2 for a usage error",
	}.write(w, nil)
}

// table is m as {name, description} rows in name order.
func table[V any](m map[string]V, describe func(V) string) [][2]string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	rows := make([][2]string, len(names))
	for i, n := range names {
		rows[i] = [2]string{n, describe(m[n])}
	}
	return rows
}

// errDenied is returned by checks whose answer is a deny: exit 1, and the
// decision itself has already been printed.
var errDenied = errors.New("denied")

// exitError carries an explicit exit code.
type exitError struct {
	code int
	err  error
	// logged is set when the error was already written to the
	// operational log (serve's start-up failures).
	logged bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErrorf(format string, a ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, a...)}
}

// exitCode is the one place an error becomes an exit status.
func exitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.Is(err, errDenied) {
		return 1
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if !ee.logged {
			fmt.Fprintf(stderr, "egressd: %v\n", err)
		}
		return ee.code
	}
	fmt.Fprintf(stderr, "egressd: %v\n", err)
	return 2
}
