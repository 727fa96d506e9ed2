package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/cmd/egressd/generation"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/replay"
	"github.com/egressd/egressd/policy/sqlfacts"
)

// policyReplayHelp is `egressd policy replay -h`.
var policyReplayHelp = helpText{
	synopsis: []string{"policy replay --policy DIR [--audit DIR] [--since T] [--config FILE] [--json] [--examples N]"},
	summary:  "re-decide the audit log's requests against a candidate bundle; print what changes",
	about: "Re-decide every recorded decision (HTTP, CONNECT, inspected requests, redirects, DNS, SQL) against the bundle in --policy, " +
		"with the code the listeners run and the config's identities and internal: entries, and print what would change: " +
		"newly denied and newly allowed requests, grouped by rule and identity, with example records. " +
		"Each record is first re-decided under the bundle that made it (archived by digest under the audit directory's bundles/); " +
		"one that comes out otherwise, or lacks a fact (a redacted query, a body, a DNS answer, a folded count), is counted apart as not re-decidable.",
	exit: "0 nothing changed, 1 something changed (listed), 2 usage error or a bundle, config or log that does not load",
}

// replayOptions is a parsed `policy replay` command line.
type replayOptions struct {
	policyDir, auditDir, config string
	since                       time.Time
	json                        bool
	examples                    int
}

func parseReplay(args []string, stdout, stderr io.Writer, now time.Time) (*replayOptions, error) {
	fs := flag.NewFlagSet("policy replay", flag.ContinueOnError)
	policyReplayHelp.install(fs)
	var o replayOptions
	fs.StringVar(&o.policyDir, "policy", "", "the candidate bundle `DIR` (required)")
	fs.StringVar(&o.auditDir, "audit", "", "audit `DIR` to replay (default: audit.dir of the config)")
	fs.StringVar(&o.config, "config", "", "config `FILE` the records were made under: identities, internal:, postgres: (default: the embedded defaults)")
	since := fs.String("since", "", "only records at or after `T` (RFC 3339, or a duration such as 24h meaning that long ago)")
	fs.BoolVar(&o.json, "json", false, "print the report as one JSON object")
	fs.IntVar(&o.examples, "examples", 3, "example records per group (`N`)")
	pos, err := parseFlags(fs, args, stdout, stderr)
	if err != nil {
		return nil, err
	}
	if len(pos) != 0 {
		return nil, usageErrorf("policy replay takes no arguments, got %q; the candidate bundle goes in --policy DIR", pos[0])
	}
	if o.policyDir == "" {
		return nil, usageErrorf("policy replay: --policy DIR is required: the candidate bundle to re-decide the log against")
	}
	if o.examples < 0 {
		return nil, usageErrorf("policy replay: --examples must be >= 0, got %d", o.examples)
	}
	if o.since, err = parseWhen(*since, now); err != nil {
		return nil, usageErrorf("--since: %v", err)
	}
	return &o, nil
}

// runPolicyReplay is `egressd policy replay`.
func runPolicyReplay(args []string, stdout, stderr io.Writer, now time.Time) error {
	o, err := parseReplay(args, stdout, stderr, now)
	if err != nil {
		return err
	}
	ctx := context.Background()
	cfg, err := config.Load(o.config)
	if err != nil {
		return loadError(err)
	}
	if o.auditDir == "" {
		o.auditDir = cfg.Audit.Dir
	}
	if st, err := os.Stat(o.auditDir); err != nil || !st.IsDir() {
		return usageErrorf("policy replay: audit directory %q is not a directory: give --audit DIR, or --config FILE whose audit.dir serve wrote", o.auditDir)
	}
	cfg.Policy.UseDir(o.policyDir)
	gen, err := generation.Build(ctx, cfg, o.config, generation.Deciding, zap.NewNop())
	if err != nil {
		return loadError(err)
	}
	rp := replay.NewReplayer(replay.Options{
		Env:      replayEnv(cfg, gen),
		New:      gen.Engine,
		Examples: max(o.examples, 1),
		Own: func(ctx context.Context, digest string) (replay.Engine, error) {
			return policy.NewArchived(ctx, cfg.Policy, policy.ArchiveDir(o.auditDir), digest, zap.NewNop())
		},
	})
	rd, err := audit.NewReader([]string{o.auditDir})
	if err != nil {
		return loadError(fmt.Errorf("audit log: %w", err))
	}
	defer rd.Close()
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return loadError(fmt.Errorf("audit log: %w", err))
		}
		if !o.since.IsZero() && rec.TS.Before(o.since) {
			continue
		}
		rp.Add(ctx, rec)
	}
	rep := rp.Report()
	if o.examples == 0 {
		for _, g := range rep.Groups {
			g.Examples = nil
		}
	}
	if o.json {
		b, err := json.Marshal(rep)
		if err != nil {
			return fmt.Errorf("encode report: %w", err)
		}
		if _, err := stdout.Write(append(b, '\n')); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
	} else if err := rep.Write(stdout); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if rep.Changed() {
		return &exitError{code: 1, err: fmt.Errorf("policy replay: %d newly denied, %d newly allowed", rep.NewlyDenied, rep.NewlyAllowed)}
	}
	return nil
}

// replayEnv is what deciding a record needs of the config: the floor, the
// identities' attributes, the gate's parse options (as `check sql` sets
// them).
func replayEnv(cfg *config.Config, gen *generation.Generation) replay.Env {
	pc := cfg.Postgres
	env := replay.Env{
		Floor: gen.Floor,
		SQL: sqlfacts.Options{SearchPath: []string{pc.SearchPath},
			Limits: sqlfacts.Limits{MaxLen: pc.MaxQueryBytes, MaxDepth: pc.MaxNesting, MaxOps: pc.MaxOperators}},
	}
	if !gen.Identities.AllAnonymous() {
		env.Identity = identityOf(gen.Identities)
	}
	return env
}

// identityOf looks an id up in store, attributes and all.
func identityOf(store *identity.Store) func(string) (policy.Identity, bool) {
	return func(id string) (policy.Identity, bool) {
		_, ident, ok := store.Lookup(id)
		return ident, ok
	}
}
