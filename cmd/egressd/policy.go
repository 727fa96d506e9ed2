package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/egressd/egressd/policy"
	defaultbundle "github.com/egressd/egressd/rego"
)

// runPolicy is `egressd policy check|test [DIR]`: check compiles the
// bundle and reports errors with file:line (exit 2); test also runs its
// Rego tests (exit 1 when one fails). Without DIR, the embedded bundle.
func runPolicy(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "init" {
		return runPolicyInit(args[1:], stdout, stderr)
	}
	if len(args) == 0 || (args[0] != "check" && args[0] != "test") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprint(stderr, policyUsage)
			return flag.ErrHelp
		}
		fmt.Fprint(stderr, policyUsage)
		return usageErrorf("policy: want init, check or test")
	}
	sub := args[0]
	fset := flag.NewFlagSet("policy "+sub, flag.ContinueOnError)
	fset.Usage = func() { fmt.Fprint(fset.Output(), policyUsage) }
	pos, err := parseFlags(fset, args[1:], stderr)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usageErrorf("policy %s takes at most one DIR, got %d", sub, len(pos))
	}
	var bundle fs.FS = defaultbundle.FS
	name := "embedded bundle"
	if len(pos) == 1 {
		if st, err := os.Stat(pos[0]); err != nil || !st.IsDir() {
			return usageErrorf("policy %s: %q is not a directory: write a bundle there with `egressd policy init %s`", sub, pos[0], pos[0])
		}
		bundle, name = os.DirFS(pos[0]), pos[0]
	}
	ctx := context.Background()
	if sub == "check" {
		digest, err := policy.Check(ctx, bundle)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("%s: %w", name, err)}
		}
		fmt.Fprintf(stdout, "ok %s %s\n", name, digest)
		return nil
	}
	passed, err := policy.Test(ctx, bundle)
	var te *policy.TestError
	if errors.As(err, &te) {
		fmt.Fprintf(stdout, "FAIL %s: %d passed, %d failed\n", name, te.Passed, len(te.Failures))
		for _, f := range te.Failures {
			fmt.Fprintf(stdout, "  %s: %s", f.Location, f.Name)
			if f.Err != nil {
				fmt.Fprintf(stdout, ": %v", f.Err)
			}
			fmt.Fprintln(stdout)
		}
		return &exitError{code: 1, err: fmt.Errorf("%s: rego tests failed", name)}
	}
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("%s: %w", name, err)}
	}
	fmt.Fprintf(stdout, "PASS %s: %d tests\n", name, passed)
	return nil
}

// runPolicyInit is `egressd policy init DIR`: the embedded bundle, with its
// tests, as the starting point of an operator's own.
func runPolicyInit(args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("policy init", flag.ContinueOnError)
	fset.Usage = func() { fmt.Fprint(fset.Output(), policyUsage) }
	pos, err := parseFlags(fset, args, stderr)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("policy init takes one DIR, got %d", len(pos))
	}
	if err := defaultbundle.Write(pos[0], true); err != nil {
		return &exitError{code: 2, err: err}
	}
	fmt.Fprintf(stdout, "wrote the default bundle to %s: edit data.json, then egressd policy test %s\n", pos[0], pos[0])
	return nil
}

const policyUsage = `usage: egressd policy init DIR      write the embedded bundle to DIR to start your own
       egressd policy check [DIR]   compile the bundle; errors name file:line (exit 2)
       egressd policy test [DIR]    compile and run its Rego tests (exit 1 on a failure)
Without DIR, the bundle embedded in the binary.
`
