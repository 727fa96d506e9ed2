package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"

	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/cmd/egressd/generation"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/replay"
)

// auditExplainHelp is `egressd audit explain -h`.
var auditExplainHelp = helpText{
	synopsis: []string{"audit explain [--config FILE] [--policy DIR] [--audit DIR] SEQ"},
	summary:  "explain a recorded decision, under the bundle that made it and the current one",
	about: "Rebuild the request record SEQ decided (as policy replay does) and print, as check --explain does, " +
		"the facts, each candidate rule with every condition and the decision: first under the bundle the record names " +
		"(archived by digest in the audit directory's bundles/), then under the config's bundle (or --policy).",
	args: [][2]string{{"SEQ", "the record's seq (audit show prints it)"}},
	exit: "0 explained, 2 no such record, a record that is no decision or lacks a fact to rebuild it, or a usage or load error",
}

// runAuditExplain is `egressd audit explain`.
func runAuditExplain(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("audit explain", flag.ContinueOnError)
	auditExplainHelp.install(fs)
	cfgPath := fs.String("config", "", "config `FILE` the record was made under: identities, internal:, postgres: (default: the embedded defaults)")
	policyDir := fs.String("policy", "", "the current bundle `DIR` (default: policy.dir of the config, else the embedded bundle)")
	auditDir := fs.String("audit", "", "audit `DIR` (default: audit.dir of the config)")
	pos, err := parseFlags(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErrorf("audit explain takes one SEQ, got %d arguments", len(pos))
	}
	seq, err := strconv.ParseUint(pos[0], 10, 64)
	if err != nil {
		return usageErrorf("audit explain: SEQ must be a record's seq number, got %q", pos[0])
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return loadError(err)
	}
	if *auditDir == "" {
		*auditDir = cfg.Audit.Dir
	}
	if *policyDir != "" {
		cfg.Policy.UseDir(*policyDir)
	}
	rec, err := findRecord(*auditDir, seq)
	if err != nil {
		return err
	}
	c, err := replay.InputOf(rec)
	var missing *replay.Missing
	switch {
	case errors.Is(err, replay.ErrNotDecision):
		return usageErrorf("audit explain: record %d is a %s record, not a decision: explain the decision it completes", seq, rec.Kind)
	case errors.As(err, &missing):
		return usageErrorf("audit explain: record %d cannot be rebuilt exactly: %v", seq, missing)
	case err != nil:
		return usageErrorf("audit explain: record %d: %v", seq, err)
	}
	ctx := context.Background()
	gen, err := generation.Build(ctx, cfg, *cfgPath, generation.Deciding, zap.NewNop())
	if err != nil {
		return loadError(err)
	}
	env := replayEnv(cfg, gen)
	w := &errWriter{w: stdout}
	fmt.Fprintf(w, "record %d: %s %s identity %s: %s %s, rule %s, policy %s\n", rec.Seq, rec.Kind, printable(target(rec)),
		cmp.Or(rec.Identity, "none"), rec.Decision, cmp.Or(rec.Reason, "none"), cmp.Or(rec.Rule, "none"), cmp.Or(rec.Policy, "none"))
	own, err := policy.NewArchived(ctx, cfg.Policy, policy.ArchiveDir(*auditDir), rec.Policy, zap.NewNop())
	fmt.Fprintf(w, "\nunder the bundle that made it (%s):\n", cmp.Or(rec.Policy, "none"))
	if err != nil {
		fmt.Fprintf(w, "  not available: %v\n", err)
	} else if err := explainCase(ctx, w, env, own, c); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nunder the current bundle (%s):\n", gen.Engine.Digest())
	if err := explainCase(ctx, w, env, gen.Engine, c); err != nil {
		return err
	}
	return w.err
}

// explainCase decides c with eng and writes the explanation of every
// question it asked the bundle, or of the refusal made before it.
func explainCase(ctx context.Context, w io.Writer, env replay.Env, eng *policy.Engine, c replay.Case) error {
	res, err := env.Decide(ctx, eng, c)
	if err != nil {
		fmt.Fprintf(w, "  not re-decidable: %v\n", err)
		return nil
	}
	var xs []policy.Explanation
	for _, in := range res.Inputs {
		xs = append(xs, eng.Explain(ctx, in))
	}
	if len(res.Inputs) == 0 {
		id := policy.Identity{ID: c.Identity}
		if env.Identity != nil {
			id, _ = env.Identity(c.Identity)
		}
		xs = append(xs, eng.ExplainRefusal(c.Kind, id, res.Facts, &policy.DenyError{Reason: res.Decision.Reason}))
	}
	for i := range xs {
		if err := xs[i].WriteText(w); err != nil {
			return fmt.Errorf("write explanation: %w", err)
		}
	}
	d := res.Decision
	verdict := "deny"
	if d.Allow {
		verdict = "allow"
	}
	_, err = fmt.Fprintf(w, "result: %s %s, rule %s\n", verdict, d.Reason, cmp.Or(d.Rule, "none"))
	return err
}

// findRecord reads dir's log until the record of seq.
func findRecord(dir string, seq uint64) (*audit.Record, error) {
	rd, err := audit.NewReader([]string{dir})
	if err != nil {
		return nil, loadError(fmt.Errorf("audit log: %w", err))
	}
	defer rd.Close()
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return nil, usageErrorf("audit explain: no record %d in %s", seq, dir)
		}
		if err != nil {
			return nil, loadError(fmt.Errorf("audit log: %w", err))
		}
		if rec.Seq == seq {
			return rec, nil
		}
	}
}

// errWriter keeps the first write error, so a run of writes is checked
// once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
