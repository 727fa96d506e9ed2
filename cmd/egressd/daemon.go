package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/cmd/egressd/generation"
	"github.com/egressd/egressd/cmd/egressd/grants"
	"github.com/egressd/egressd/dnsguard"
	"github.com/egressd/egressd/internal/admin"
	"github.com/egressd/egressd/internal/fdlimit"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/internal/metrics"
	"github.com/egressd/egressd/internal/version"
	"github.com/egressd/egressd/proxy"
	"github.com/egressd/egressd/proxy/broker"
	"github.com/egressd/egressd/proxy/budget"
	"github.com/egressd/egressd/proxy/ca"
	"github.com/egressd/egressd/proxy/pggate"
	"github.com/egressd/egressd/proxy/secretpat"
)

// daemon is the running serve command.
type daemon struct {
	// cfg is the config at start; gen holds the reloadable part in force.
	cfg      *config.Config
	gen      *generation.Running
	log      *zap.Logger
	audit    *audit.Writer
	meter    *audit.Meter // what every entry point appends through
	metrics  *proxy.Metrics
	registry *prometheus.Registry
	proxy    *proxy.Server
	dns      *dnsguard.Server // nil unless dns.listen is set
	gate     *pggate.Gate     // nil unless postgres.listen is set
	fds      *fdlimit.Budget  // nil if the limit could not be read
	grants   *grants.Manager
	// adminAuth are admin.clients' credentials, checked by prepare.
	adminAuth *admin.Auth

	// draining is set when the drain starts: /readyz fails from then on.
	draining atomic.Bool
}

// knownIdentity reports whether id is an identity of the generation in
// force: "anonymous" when none are configured.
func (d *daemon) knownIdentity(id string) bool {
	ids := d.gen.Current().Identities
	if ids.AllAnonymous() {
		return id == identity.Anonymous.ID
	}
	_, _, ok := ids.Lookup(id)
	return ok
}

// build makes the daemon from what prepare read and checked; the secrets
// it loads go into store, which the logger already scrubs with.
func build(ctx context.Context, cfg *config.Config, cfgPath string, log *zap.Logger, store *broker.Store) (*daemon, error) {
	s, err := prepare(ctx, cfg, cfgPath, log)
	if err != nil {
		return nil, err
	}
	gen, res, liveGrants, expiredGrants := s.gen, s.resolver, s.liveGrants, s.expiredGrants
	store.Set(gen.Secrets)
	// Opened before the audit log: a CA key others can read stops start-up
	// before anything is served or recorded (prepare checked it; Open
	// creates what is missing). Inspected CONNECTs are terminated with
	// the identity's own root, and their upstreams verified against
	// inspect.upstream_ca_file (or the system roots); inspect: is read at
	// start only.
	caOpts := cfg.InspectOptions()
	authority, err := ca.Open(cfg.Inspect.CADir, caOpts)
	if err != nil {
		return nil, fmt.Errorf("inspect.ca_dir: %w", err)
	}
	caDir, err := filepath.Abs(cfg.Inspect.CADir)
	if err != nil {
		caDir = cfg.Inspect.CADir
	}
	log.Info("HTTPS inspection CA directory (one root per identity; `egressd ca export --identity ID` gives a sandbox its root)",
		zap.String("dir", caDir), zap.Bool("shared_read_only", authority.ReadOnly()))
	ac := cfg.Audit
	ac.Started = startedDetail(cfgPath, gen.Engine.Digest())
	// Budgets are rebuilt from the log before this start appends to it.
	budgets := budget.NewLedger(time.Now)
	n, err := proxy.RebuildBudgets(budgets, ac.Dir, gen.Engine.RuleOptions, gen.Identities, time.Now())
	if err != nil {
		return nil, err
	}
	if n > 0 {
		log.Info("budgets rebuilt from the audit log", zap.Int("records", n))
	}
	aw, err := audit.Open(ac, log)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	argsKey, err := audit.LocalKey(ac.Dir)
	if err != nil {
		return nil, errors.Join(err, aw.Close())
	}
	// One meter for all entry points: an identity's budget is shared by
	// its HTTP, DNS and SQL records.
	meter := audit.NewMeter(aw, cfg.Audit)
	reg := metrics.NewRegistry(version.Get())
	admin.RegisterAudit(reg, aw.Stats, meter.Stats)
	authority.Register(reg)
	d := &daemon{cfg: cfg, adminAuth: s.adminAuth, log: log, audit: aw, meter: meter, registry: reg, metrics: proxy.NewMetrics(reg), fds: descriptorBudget(log)}
	// Registered without a gate too, so a dashboard's gate panels read 0.
	logins := metrics.NewLogins(reg)
	// DNS queries and SQL statements are counted as they are audited, in
	// the proxy's decision counter.
	counted := metrics.Counting(meter, d.metrics.Decisions)
	if gen.Secrets.Len() > 0 {
		log.Info("secrets loaded", zap.Int("secrets", gen.Secrets.Len()))
	}
	fail := func(err error) (*daemon, error) {
		meter.Close()
		return nil, errors.Join(err, aw.Close())
	}
	dialer := dnsguard.NewDialer(res, gen.Floor, cfg.Proxy.DialTimeout)
	given, own := transparentChecks(cfg, log)
	d.proxy, err = proxy.New(proxy.Options{
		Given: given, Own: own,
		Config: cfg.Proxy, Decider: gen.Engine, Floor: gen.Floor, Identities: gen.Identities, Dialer: dialer,
		Audit: meter, Metrics: d.metrics, Log: log, FDs: d.fds, Secrets: store,
		Leaves: authority, UpstreamRoots: s.upstreamRoots, ArgsKey: argsKey, Budgets: budgets,
		// The shipped shapes, recorded unless a rule or identity refuses
		// them.
		SecretPatterns: secretpat.MustDefaults(),
	})
	if err != nil {
		return fail(err)
	}
	reloaders := []generation.Reloader{d.proxy}
	if cfg.DNS.Listen != "" {
		d.dns, err = dnsguard.NewServer(dnsguard.ServerOptions{
			Config: cfg.DNS, Decider: gen.Engine, Resolver: res, Audit: counted,
			Identities: gen.Identities, Log: log, Decisions: d.metrics.Decisions, Given: given,
		})
		if err != nil {
			return fail(err)
		}
		reloaders = append(reloaders, d.dns)
	}
	if cfg.Postgres.Listen != "" {
		// The gate dials its upstream through the same pinned dialer as the
		// proxy, so the address floor and `internal:` apply to it too.
		d.gate, err = pggate.New(cfg.Postgres, pggate.Deps{
			Engine: gen.Engine, Identities: gen.Identities, Audit: counted, Dial: dialer.DialContext, Floor: gen.Floor, Log: log,
			Logins: logins,
		})
		if err != nil {
			return fail(fmt.Errorf("postgres: %w", err))
		}
		reloaders = append(reloaders, d.gate)
	}
	d.gen = generation.NewRunning(gen, generation.Options{
		Path: cfgPath, Log: log, Flush: res.Flush, Secrets: store, Listeners: reloaders,
		Policy: metrics.NewPolicy(reg), Reloads: d.metrics.Reloads, OpenedRoots: caOpts.Configured,
		AuditDir: cfg.Audit.Dir,
	})
	d.grants, err = grants.New(grants.Options{
		Path: grants.Path(cfg.Audit.Dir), AuditDir: cfg.Audit.Dir, Audit: aw, Apply: d.gen.SetGrants,
		Known: d.knownIdentity, Registerer: reg, Log: log.Named("grants"),
	}, liveGrants, expiredGrants)
	if err != nil {
		return fail(err)
	}
	return d, nil
}
