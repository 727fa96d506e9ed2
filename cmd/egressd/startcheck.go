package main

import (
	"context"
	"crypto/x509"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/export"
	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/cmd/egressd/generation"
	"github.com/egressd/egressd/cmd/egressd/grants"
	"github.com/egressd/egressd/dnsguard"
	"github.com/egressd/egressd/internal/admin"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/ca"
	"github.com/egressd/egressd/proxy/pggate"
)

// startup is what serve reads and checks before it writes or binds
// anything: the one answer to "would serve accept this config?". serve
// builds on it (build), and `serve --check` and `policy check|test
// --config` run it and stop, so that a case one refuses the others refuse
// with the same message.
type startup struct {
	gen *generation.Generation
	// liveGrants are in gen's policy; expiredGrants are recorded as
	// expired when the grants manager starts.
	liveGrants, expiredGrants []policy.Grant
	resolver                  *dnsguard.Resolver
	upstreamRoots             *x509.CertPool
	adminAuth                 *admin.Auth
}

// prepare runs every start-up check in serve's order: the grants file,
// the generation (internal:, the bundle and its Rego tests, identities,
// credential bindings, the secrets' values), the DNS resolver, the CA
// directory and configured roots (ca.Check: created by Open, never here),
// the upstream roots, the audit signing key, the Postgres gate's upstream,
// password and TLS pair, the admin clients. The listeners' addresses are
// parsed by config.Load; binding them is left to run. It writes nothing.
func prepare(ctx context.Context, cfg *config.Config, cfgPath string, log *zap.Logger) (*startup, error) {
	var s startup
	var err error
	// The grants in force at the last stop, less those expired since,
	// decide from the first request on.
	if s.liveGrants, s.expiredGrants, err = grants.Load(grants.Path(cfg.Audit.Dir), time.Now()); err != nil {
		return nil, err
	}
	cfg.Policy.Grants = s.liveGrants
	if s.gen, err = generation.Build(ctx, cfg, cfgPath, generation.Serving, log); err != nil {
		return nil, err
	}
	if s.resolver, err = dnsguard.NewResolver(cfg.DNS, s.gen.Floor, log); err != nil {
		return nil, err
	}
	if err := ca.Check(cfg.Inspect.CADir, cfg.InspectOptions()); err != nil {
		return nil, fmt.Errorf("inspect.ca_dir: %w", err)
	}
	if s.upstreamRoots, err = ca.UpstreamRoots(cfg.Inspect.UpstreamCAFile); err != nil {
		return nil, err
	}
	if cfg.Audit.SigningKey != "" {
		if _, err := audit.LoadPrivateKey(cfg.Audit.SigningKey); err != nil {
			return nil, fmt.Errorf("audit.signing_key: %w", err)
		}
	}
	if err := export.Check(cfg.Audit.Export); err != nil {
		return nil, err
	}
	if cfg.Postgres.Listen != "" {
		// pggate's errors name their postgres.* key.
		if err := pggate.Check(cfg.Postgres); err != nil {
			return nil, err
		}
	}
	if s.adminAuth, err = admin.NewAuth(cfg.Admin.Clients); err != nil {
		return nil, fmt.Errorf("admin.clients: %w", err)
	}
	return &s, nil
}

// startCheck is `serve --check` and `policy check|test --config`: load
// cfgPath as serve does and run prepare, with the bundle in dir instead
// of the config's when dir is not "". Every refusal exits 2 with serve's
// message (secrets in it redacted as serve redacts them).
func startCheck(ctx context.Context, cfgPath, dir string) (*startup, error) {
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	if dir != "" {
		cfg.Policy.UseDir(dir)
	}
	s, err := prepare(ctx, cfg, cfgPath, zap.NewNop())
	if err != nil {
		return nil, &exitError{code: 2, err: cfg.Redact(err)}
	}
	return s, nil
}
