package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/proxy/broker"
)

// runServe is `egressd serve`: the proxy and admin listeners, and the DNS
// and Postgres listeners when configured, until SIGTERM.
func runServe(args []string, stdout, stderr io.Writer) error {
	ensureProcs()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	helpText{
		synopsis: []string{"serve [--config FILE] [--audit-accept-break]", "serve --check [--config FILE]"},
		about: "Run the proxy and admin listeners, and the DNS and Postgres listeners when dns.listen and postgres.listen are set, " +
			"until SIGTERM or SIGINT. SIGHUP or POST /-/reload on the admin listener reloads identities, internal and the policy. " +
			"With no --config: the proxy on 127.0.0.1:3128, admin on 127.0.0.1:9090, the audit log in ./egressd-audit, the embedded policy. " +
			"With --check: run every start-up check (config, bundle and its Rego tests, secrets readable, credential bindings, CA directory, " +
			"listener addresses, admin clients) through the code serve starts with, then exit, binding and writing nothing.",
		exit: "0 after a clean stop (--check: serve would start), 2 when the config, policy or audit log does not load or a listener cannot start",
	}.install(fs)
	cfgPath := fs.String("config", "", "config `FILE` (default: the embedded defaults)")
	check := fs.Bool("check", false, "run every start-up check that binds and writes nothing, then exit: 0 if serve would start")
	acceptBreak := fs.Bool("audit-accept-break", false, "start even if the newest audit segment's chain is broken, recording the acceptance")
	pos, err := parseFlags(fs, args, stdout, stderr)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErrorf("serve takes no arguments, got %q", pos)
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		// No config to say how to log: the format the file asks for if
		// it can be read that far, else the default (json).
		log, _ := newLogger(config.Log{Level: "info", Format: config.LogFormatOf(*cfgPath)}, stderr, nil)
		return startupFailed(log, err)
	}
	// The secrets' store exists before the logger, which scrubs every
	// line of the values in force; build loads them.
	secrets := broker.NewStore(nil)
	log, err := newLogger(cfg.Log, stderr, secrets.Scrub)
	if err != nil {
		return usageErrorf("%v", err)
	}
	defer routeStdLog(log)()
	// Sync of stderr fails with EINVAL on a terminal; there is no one left
	// to tell at exit either way.
	defer func() { _ = log.Sync() }()
	cfg.Audit.AcceptBreak = *acceptBreak
	if *check {
		// serve --check fetches the bundle serve would start with (a
		// poll writes nothing), and stops polling.
		bundles, _, err := firstBundle(context.Background(), cfg, log)
		if err != nil {
			return startupFailed(log, cfg.Redact(err))
		}
		if bundles != nil {
			bundles.Stop()
		}
		s, err := prepare(context.Background(), cfg, *cfgPath, log)
		if err != nil {
			return startupFailed(log, cfg.Redact(err))
		}
		fmt.Fprintf(stdout, "ok %s: serve would start with policy %s\n", configName(*cfgPath), s.gen.Engine.Digest())
		return nil
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	d, err := build(ctx, cfg, *cfgPath, log, secrets)
	if err != nil {
		// build's collaborators quote what they were given (a file
		// name in an open error); some config values are secrets.
		return startupFailed(log, cfg.Redact(err))
	}
	defer func() {
		if err := d.audit.Close(); err != nil {
			log.Error("close audit log", zap.Error(err))
		}
	}()
	// Closed before the writer: it writes the last second's counts.
	defer d.meter.Close()
	if err := d.run(ctx); err != nil {
		return startupFailed(log, err)
	}
	return nil
}

// startupFailed writes a fatal error as the operational log's last line,
// in its format (a log collector parsing JSON lines would drop a plain
// "egressd: …" line), and returns an error that exits 2 without printing
// it again. Without a logger (nil: one that could not be built) the
// message stays plain.
func startupFailed(log *zap.Logger, err error) error {
	if log == nil {
		return &exitError{code: 2, err: err}
	}
	log.Error("egressd cannot run", zap.Error(err))
	log.Sync() //nolint:errcheck // flushing stderr at exit: nowhere left to report a failure
	return &exitError{code: 2, err: err, logged: true}
}

// configName is how the start-up checks' answers name the config: its
// path, or "embedded defaults".
func configName(path string) string {
	if path == "" {
		return "embedded defaults"
	}
	return path
}
