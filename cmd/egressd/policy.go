package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/egressd/egressd/policy"
	defaultbundle "github.com/egressd/egressd/rego"
)

// policyActions are `egressd policy`'s actions and their -h text.
var policyActions = map[string]helpText{
	"init": {
		synopsis: []string{"policy init DIR"},
		summary:  "write the embedded bundle to DIR to start your own",
		about:    "Write the embedded bundle (modules, data.json, the Rego tests that hold for any rules, README) to DIR, as the start of your own.",
		args:     [][2]string{{"DIR", "a directory that does not exist or is empty"}},
		exit:     "0 written, 2 usage error or DIR not empty or not writable",
	},
	"check": {
		synopsis: []string{"policy check [--config FILE] [DIR]"},
		summary:  "compile the bundle; errors name file:line",
		about: "Compile the bundle and check its data (rules, SQL profiles); print its digest. Errors name file:line, or the rule's index and id. " +
			"With --config: run every start-up check of `serve --check` with that config (the bundle DIR, else the config's), so that a bundle serve refuses is refused here.",
		args: [][2]string{{"DIR", "the bundle directory (default: policy.dir of --config, else the bundle embedded in the binary)"}},
		exit: "0 the bundle loads (--config: serve would start), 2 it does not (or a usage error)",
	},
	"test": {
		synopsis: []string{"policy test [--config FILE] [DIR]"},
		summary:  "compile the bundle and run its Rego tests",
		about: "Compile the bundle and run its Rego tests (*_test.rego), as start-up and every reload do: a bundle whose tests fail is refused. " +
			"With --config: run every start-up check of `serve --check` with that config too (the bundle DIR, else the config's).",
		args: [][2]string{{"DIR", "the bundle directory (default: policy.dir of --config, else the bundle embedded in the binary)"}},
		exit: "0 every test passed (--config: and serve would start), 1 a test failed (each is named), 2 the bundle does not load, serve would refuse the config (or a usage error)",
	},
	"replay": policyReplayHelp,
}

// runPolicy is `egressd policy init|check|test|replay`.
func runPolicy(args []string, stdout, stderr io.Writer) error {
	sub, err := groupAction("policy", policyActions, "init, check, test or replay", args, stdout, stderr)
	if err != nil {
		return err
	}
	if sub == "replay" {
		return runPolicyReplay(args[1:], stdout, stderr, time.Now())
	}
	h := policyActions[sub]
	fset := flag.NewFlagSet("policy "+sub, flag.ContinueOnError)
	h.install(fset)
	var cfgPath string
	if sub != "init" {
		fset.StringVar(&cfgPath, "config", "", "check the bundle with config `FILE` as `serve --check` would")
	}
	pos, err := parseFlags(fset, args[1:], stdout, stderr)
	if err != nil {
		return err
	}
	if sub == "init" {
		return runPolicyInit(pos, stdout)
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
	if cfgPath != "" {
		return policyWithConfig(ctx, sub, cfgPath, pos, stdout)
	}
	if sub == "check" {
		digest, err := policy.Check(ctx, bundle)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("%s: %w", name, err)}
		}
		fmt.Fprintf(stdout, "ok %s %s\n", name, digest)
		return nil
	}
	passed, err := policy.Test(ctx, bundle)
	return testResult(name, passed, err, stdout)
}

// policyWithConfig is `policy check|test --config FILE [DIR]`: serve's
// start-up checks (startCheck), which compile the bundle and run its Rego
// tests as serve does. A failed Rego test is reported as `policy test`
// reports it; every other refusal is serve's message, exit 2.
func policyWithConfig(ctx context.Context, sub, cfgPath string, pos []string, stdout io.Writer) error {
	var dir string
	if len(pos) == 1 {
		dir = pos[0]
	}
	s, err := startCheck(ctx, cfgPath, dir)
	name := "bundle with config " + cfgPath
	if err != nil && sub == "test" {
		return testResult(name, 0, err, stdout)
	}
	if err != nil {
		return err
	}
	verdict := map[string]string{"check": "ok", "test": "PASS"}[sub]
	fmt.Fprintf(stdout, "%s %s: serve would start with policy %s\n", verdict, name, s.gen.Engine.Digest())
	return nil
}

// testResult reports the outcome of a bundle's Rego tests: PASS and the
// count, or FAIL and each failed test (exit 1), or the load error (exit 2).
func testResult(name string, passed int, err error, stdout io.Writer) error {
	var te *policy.TestError
	if errors.As(err, &te) {
		fmt.Fprintf(stdout, "FAIL %s: %d passed, %d failed\n", name, te.Passed, len(te.Failures))
		for _, f := range te.Failures {
			fmt.Fprintf(stdout, "  %s: %s", f.Location, f.Name)
			if f.Err != nil {
				fmt.Fprintf(stdout, ": %v", f.Err)
			}
			fmt.Fprintln(stdout)
			if f.Trace != "" {
				fmt.Fprintln(stdout, "    "+strings.ReplaceAll(f.Trace, "\n", "\n    "))
			}
		}
		return &exitError{code: 1, err: fmt.Errorf("%s: rego tests failed", name)}
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("%s: %w", name, err)}
	}
	fmt.Fprintf(stdout, "PASS %s: %d tests\n", name, passed)
	return nil
}

// runPolicyInit is `egressd policy init DIR`: the embedded bundle, with its
// tests, as the starting point of an operator's own.
func runPolicyInit(pos []string, stdout io.Writer) error {
	if len(pos) != 1 {
		return usageErrorf("policy init takes one DIR, got %d", len(pos))
	}
	if err := defaultbundle.Write(pos[0], true); err != nil {
		return &exitError{code: 2, err: err}
	}
	fmt.Fprintf(stdout, "wrote the default bundle to %s: edit data.json, then egressd policy test %s\n", pos[0], pos[0])
	return nil
}
