package main

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/dnsguard"
	"github.com/egressd/egressd/internal/metrics"
	"github.com/egressd/egressd/internal/version"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy"
	"github.com/egressd/egressd/proxy/admin"
	"github.com/egressd/egressd/proxy/broker"
	"github.com/egressd/egressd/proxy/ca"
	"github.com/egressd/egressd/proxy/fdlimit"
	"github.com/egressd/egressd/proxy/identity"
	"github.com/egressd/egressd/proxy/pggate"
)

// runServe is `egressd serve`: the proxy and admin listeners, and the DNS
// and Postgres listeners when configured, until SIGTERM.
func runServe(args []string, _, stderr io.Writer) error {
	ensureProcs()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	helpText{
		synopsis: []string{"serve [--config FILE] [--audit-accept-break]"},
		about: "Run the proxy and admin listeners, and the DNS and Postgres listeners when dns.listen and postgres.listen are set, " +
			"until SIGTERM or SIGINT. SIGHUP or POST /-/reload on the admin listener reloads identities, internal and the policy. " +
			"With no --config: the proxy on 127.0.0.1:3128, admin on 127.0.0.1:9090, the audit log in ./egressd-audit, the embedded policy.",
		exit: "0 after a clean stop, 2 when the config, policy or audit log does not load or a listener cannot start",
	}.install(fs)
	cfgPath := fs.String("config", "", "config `FILE` (default: the embedded defaults)")
	acceptBreak := fs.Bool("audit-accept-break", false, "start even if the newest audit segment's chain is broken, recording the acceptance")
	pos, err := parseFlags(fs, args, stderr)
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

// daemon is the running serve command.
type daemon struct {
	cfg      *config.Config
	cfgPath  string
	log      *zap.Logger
	engine   atomic.Pointer[policy.Engine]
	floor    *dnsguard.Floor
	res      *dnsguard.Resolver
	audit    *audit.Writer
	meter    *audit.Meter // what every entry point appends through
	metrics  *proxy.Metrics
	registry *prometheus.Registry
	proxy    *proxy.Server
	dns      *dnsguard.Server // nil unless dns.listen is set
	gate     *pggate.Gate     // nil unless postgres.listen is set
	fds      *fdlimit.Budget  // nil if the limit could not be read
	// secrets are the brokered secrets' values; a reload re-reads them and
	// swaps them in place.
	secrets *broker.Store
	// inspectCA holds the per-identity roots that inspected CONNECTs get
	// their leaves from, and inspectRoots the CAs upstream certificates
	// inside inspected tunnels must chain to (inspect.upstream_ca_file or
	// the system roots). Both are opened at start (inspect: is not
	// reloadable); the HTTPS-inspection proxy takes them.
	inspectCA    *ca.Authority
	inspectRoots *x509.CertPool
	// inspectConfigured are the identities' configured roots inspectCA
	// was opened with.
	inspectConfigured map[string]ca.Files
	reloadMu          sync.Mutex

	// policyInfo exports the running bundle's digest and load time;
	// logins counts gate logins (registered with or without a gate).
	policyInfo *metrics.Policy
	logins     *metrics.Logins

	// draining is set when the drain starts: /readyz fails from then on.
	draining atomic.Bool
}

// build makes the daemon; the secrets it loads go into store, which the
// logger already scrubs with.
func build(ctx context.Context, cfg *config.Config, cfgPath string, log *zap.Logger, store *broker.Store) (*daemon, error) {
	floor, err := dnsguard.NewFloor(cfg.Internal)
	if err != nil {
		return nil, fmt.Errorf("internal: %w", err)
	}
	res, err := dnsguard.NewResolver(cfg.DNS, floor, log)
	if err != nil {
		return nil, err
	}
	engine, err := policy.New(ctx, cfg.Policy, log)
	if err != nil {
		return nil, fmt.Errorf("load policy: %w", err)
	}
	ids, err := identity.New(cfg.Identities)
	if err != nil {
		return nil, err
	}
	if err := checkIdentities(cfgPath, cfg.Identities, engine); err != nil {
		return nil, err
	}
	if err := checkCredentials(cfgPath, cfg, engine, floor); err != nil {
		return nil, err
	}
	secrets, err := cfg.LoadSecrets()
	if err != nil {
		return nil, err
	}
	store.Set(secrets)
	// Opened before the audit log: a CA key others can read stops start-up
	// before anything is served or recorded.
	caOpts := cfg.InspectOptions()
	authority, err := ca.Open(cfg.Inspect.CADir, caOpts)
	if err != nil {
		return nil, fmt.Errorf("inspect.ca_dir: %w", err)
	}
	upstreamRoots, err := ca.UpstreamRoots(cfg.Inspect.UpstreamCAFile)
	if err != nil {
		return nil, err
	}
	caDir, err := filepath.Abs(cfg.Inspect.CADir)
	if err != nil {
		caDir = cfg.Inspect.CADir
	}
	log.Info("HTTPS inspection CA directory (one root per identity; `egressd ca export --identity ID` gives a sandbox its root)",
		zap.String("dir", caDir))
	ac := cfg.Audit
	ac.Started = startedDetail(cfgPath, engine.Digest())
	aw, err := audit.Open(ac, log)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	// One meter for all entry points: an identity's budget is shared by
	// its HTTP, DNS and SQL records.
	meter := audit.NewMeter(aw, cfg.Audit)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		admin.AuditCollector(aw.Stats),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "egressd_audit_refusals_folded_total",
			Help: "Refusals counted into aggregate audit records (audit.refusal_samples) instead of written in full.",
		}, func() float64 { return float64(meter.Stats().Folded) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "egressd_audit_over_budget_total",
			Help: "Allows refused with audit_budget_exceeded because their identity spent its audit budget.",
		}, func() float64 { return float64(meter.Stats().OverBudget) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "egressd_inspect_leaves_minted_total",
			Help: "Leaf certificates signed for inspected CONNECTs (cache misses).",
		}, func() float64 { return float64(authority.Stats().Mints) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "egressd_inspect_leaf_cache_hits_total",
			Help: "Inspected CONNECTs served a cached leaf (or one another CONNECT was minting).",
		}, func() float64 { return float64(authority.Stats().Hits) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "egressd_inspect_leaf_cache_entries",
			Help: "Leaves in the in-memory cache (inspect.leaf_cache bounds it).",
		}, func() float64 { return float64(authority.Stats().Cached) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "egressd_inspect_roots_created_total",
			Help: "Per-identity CA roots created in inspect.ca_dir since start.",
		}, func() float64 { return float64(authority.Stats().Roots) }))
	d := &daemon{cfg: cfg, cfgPath: cfgPath, log: log, floor: floor, res: res, audit: aw, meter: meter,
		registry: reg, metrics: proxy.NewMetrics(reg), policyInfo: metrics.NewPolicy(reg), fds: descriptorBudget(log),
		secrets:   store,
		inspectCA: authority, inspectRoots: upstreamRoots, inspectConfigured: caOpts.Configured}
	metrics.RegisterBuildInfo(reg, version.Get())
	// Registered without a gate too, so a dashboard's gate panels read 0.
	d.logins = metrics.NewLogins(reg)
	d.policyInfo.Loaded(engine.Digest(), time.Now())
	// DNS queries and SQL statements are counted as they are audited, in
	// the proxy's decision counter.
	counted := metrics.Counting(meter, d.metrics.Decisions)
	if secrets.Len() > 0 {
		log.Info("secrets loaded", zap.Int("secrets", secrets.Len()))
	}
	fail := func(err error) (*daemon, error) {
		meter.Close()
		return nil, errors.Join(err, aw.Close())
	}
	d.engine.Store(engine)
	dialer := dnsguard.NewDialer(res, floor, cfg.Proxy.DialTimeout)
	d.proxy, err = proxy.New(proxy.Options{
		Config:     cfg.Proxy,
		Decider:    engine,
		Floor:      floor,
		Identities: ids,
		Dialer:     dialer,
		Audit:      meter,
		Metrics:    d.metrics,
		Log:        log,
		FDs:        d.fds,
		Secrets:    d.secrets,
		// Inspected CONNECTs are terminated with the identity's own CA
		// and their upstreams verified against inspect.upstream_ca_file
		// (or the system roots).
		Leaves:        d.inspectCA,
		UpstreamRoots: d.inspectRoots,
	})
	if err != nil {
		return fail(err)
	}
	if cfg.DNS.Listen != "" {
		d.dns, err = dnsguard.NewServer(dnsguard.ServerOptions{
			Config: cfg.DNS, Decider: engine, Resolver: res, Audit: counted,
			Identities: ids, Log: log, Decisions: d.metrics.Decisions,
		})
		if err != nil {
			return fail(err)
		}
	}
	if cfg.Postgres.Listen != "" {
		// The gate dials its upstream through the same pinned dialer as the
		// proxy, so the address floor and `internal:` apply to it too.
		d.gate, err = pggate.New(cfg.Postgres, pggate.Deps{
			Engine: engine, Identities: ids, Audit: counted, Dial: dialer.DialContext, Floor: floor, Log: log,
			Logins: d.logins,
		})
		if err != nil {
			return fail(fmt.Errorf("postgres: %w", err))
		}
	}
	return d, nil
}

// descriptorBudget raises the soft RLIMIT_NOFILE to the hard limit, logs
// both, and returns the budget the client listeners refuse by; nil (no
// budget) if the limit cannot be read.
func descriptorBudget(log *zap.Logger) *fdlimit.Budget {
	lim, err := fdlimit.Raise()
	if err != nil {
		log.Warn("cannot read or raise the file descriptor limit; clients are refused only on max_conns", zap.Error(err))
		return nil
	}
	b := fdlimit.NewBudget(lim.Soft)
	log.Info("file descriptor limit", zap.Uint64("soft", lim.Soft), zap.Uint64("hard", lim.Hard),
		zap.Int("reserve", b.Reserve()))
	return b
}

// reloader is what a reload asks of each listener (proxy, DNS, Postgres):
// take the new policy and identities for new requests, queries and
// statements.
type reloader interface {
	Reload(d policy.Decider, ids *identity.Store)
}

// listeners are the running listeners a reload reaches.
func (d *daemon) listeners() []reloader {
	ls := []reloader{d.proxy}
	if d.dns != nil {
		ls = append(ls, d.dns)
	}
	if d.gate != nil {
		ls = append(ls, d.gate)
	}
	return ls
}

func (d *daemon) run(ctx context.Context) error {
	pln, err := net.Listen("tcp", d.cfg.Proxy.Listen)
	if err != nil {
		return fmt.Errorf("proxy listen: %w", err)
	}
	aln, err := net.Listen("tcp", d.cfg.Admin.Listen)
	if err != nil {
		pln.Close()
		return fmt.Errorf("admin listen: %w", err)
	}
	var gln net.Listener
	if d.gate != nil {
		if gln, err = net.Listen("tcp", d.cfg.Postgres.Listen); err != nil {
			pln.Close()
			aln.Close()
			return fmt.Errorf("postgres listen: %w", err)
		}
		if d.fds != nil {
			gln = &fdlimit.Listener{Listener: gln, Raw: gln.(*net.TCPListener), Budget: d.fds, Name: "postgres", Audit: d.audit, Log: d.log}
		}
	}
	// DNS binds here with the others, so that a port in use fails the
	// start before anything is announced as serving.
	var dnsPC net.PacketConn
	var dnsLn net.Listener
	if d.dns != nil {
		if dnsPC, err = net.ListenPacket("udp", d.cfg.DNS.Listen); err == nil {
			if dnsLn, err = net.Listen("tcp", d.cfg.DNS.Listen); err != nil {
				dnsPC.Close()
			}
		}
		if err != nil {
			pln.Close()
			aln.Close()
			if gln != nil {
				gln.Close()
			}
			return fmt.Errorf("dns listen: %w", err)
		}
	}
	var mln net.Listener
	if d.cfg.Metrics.Listen != "" {
		if mln, err = net.Listen("tcp", d.cfg.Metrics.Listen); err != nil {
			pln.Close()
			aln.Close()
			if gln != nil {
				gln.Close()
			}
			if dnsPC != nil {
				dnsPC.Close()
				dnsLn.Close()
			}
			return fmt.Errorf("metrics listen: %w", err)
		}
	}
	running := []string{"proxy"}
	if d.dns != nil {
		running = append(running, "dns")
	}
	ready := []admin.Check{
		// First: a load balancer must stop sending the moment the drain
		// starts, whatever else holds.
		{Name: "draining", Fn: func(context.Context) error {
			if d.draining.Load() {
				return errors.New("egressd is shutting down")
			}
			return nil
		}},
	}
	if d.gate != nil {
		running = append(running, "postgres")
		// Fails readiness as a whole too: a sandbox sent here would have
		// its logins refused upstream_unavailable. /readyz/proxy leaves
		// it out for a balancer of the proxy alone.
		ready = append(ready, admin.Check{Name: "postgres", Fn: d.gate.Ready, Listeners: []string{"postgres"}})
	}
	adminSrv := &http.Server{
		Handler: admin.Handler(admin.Options{
			Gatherer:  d.registry,
			Listeners: running,
			Ready: append(ready, []admin.Check{
				{Name: "policy", Fn: func(context.Context) error {
					if d.engine.Load().Digest() == "" {
						return errors.New("no policy loaded")
					}
					return nil
				}},
				{Name: "audit", Fn: func(context.Context) error { return d.audit.Ready() }},
				admin.DNSCheck(d.cfg.DNS.Upstreams),
			}...),
			Reload: d.reload,
			Log:    d.log,
		}),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          zap.NewStdLog(d.log.Named("admin")),
	}
	metricsSrv := &http.Server{
		Handler:           admin.MetricsHandler(d.registry),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          zap.NewStdLog(d.log.Named("metrics")),
	}
	errc := make(chan error, 5)
	go func() { errc <- d.proxy.Serve(pln) }()
	// The admin listener is never refused for want of descriptors; at
	// the very end it accepts into a spare one.
	go func() { errc <- adminSrv.Serve(fdlimit.NewSpare(aln)) }()
	dnsCtx, stopDNS := context.WithCancel(ctx)
	defer stopDNS()
	if d.dns != nil {
		go func() { errc <- d.dns.Serve(dnsCtx, dnsPC, dnsLn) }()
	}
	if d.gate != nil {
		go func() { errc <- d.gate.Serve(gln) }()
	}
	if mln != nil {
		go func() { errc <- metricsSrv.Serve(mln) }()
	}
	d.log.Info("serving", append(listenerFields(pln, aln, dnsPC, dnsLn, gln, mln),
		zap.String("policy", d.engine.Load().Digest()))...)

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var serveErr error
loop:
	for {
		select {
		case <-hup:
			if _, err := d.reload(ctx); err != nil {
				d.log.Warn("reload refused; previous configuration stays", zap.Error(err))
			}
		case err := <-errc:
			serveErr = err
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), d.cfg.Proxy.DrainTimeout)
	defer cancel()
	d.drain(sctx, stopDNS)
	if err := adminSrv.Shutdown(sctx); err != nil {
		d.log.Warn("drain deadline passed; closed the admin listener's remaining connections", zap.Error(err))
	}
	if err := metricsSrv.Shutdown(sctx); err != nil {
		d.log.Warn("drain deadline passed; closed the metrics listener's remaining connections", zap.Error(err))
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) && !errors.Is(serveErr, pggate.ErrClosed) {
		return serveErr
	}
	d.log.Info("stopped")
	return nil
}

// drain is one drain for every client listener: /readyz fails at once,
// the proxy and the Postgres gate stop accepting together and drain in
// parallel until ctx's deadline (proxy.drain_timeout), the DNS server
// stops; each records what it cuts at the deadline. The admin listener
// stays up meanwhile, answering /readyz 503.
func (d *daemon) drain(ctx context.Context, stopDNS func()) {
	d.draining.Store(true)
	d.log.Info("draining", zap.Duration("deadline", d.cfg.Proxy.DrainTimeout))
	stopDNS()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := d.proxy.Shutdown(ctx); err != nil {
			d.log.Warn("drain deadline passed; cut the remaining proxy connections", zap.Error(err))
		}
	})
	if d.gate != nil {
		wg.Go(func() {
			if err := d.gate.Shutdown(ctx); err != nil {
				d.log.Warn("drain deadline passed; ended the remaining postgres sessions", zap.Error(err))
			}
		})
	}
	wg.Wait()
}

// reload re-reads the config file, the secrets' files and variables and
// the policy bundle. Identities, `internal:`, secrets and the policy take
// effect for new requests and dials;
// changes to any other section need a restart and are named in a warning.
// A config or bundle that fails to load is refused and the running state
// stays.
// It returns the sections that changed but wait for a restart.
func (d *daemon) reload(ctx context.Context) ([]string, error) {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	// No code quotes a secret's value; redacting what a reload reports
	// (the log, POST /-/reload's answer) is the last guard.
	pending, err := d.reloadLocked(ctx)
	err = d.secrets.Load().Redact(err)
	result := "ok"
	if err != nil {
		result = "failed"
	}
	d.metrics.Reloads.WithLabelValues(result).Inc()
	return pending, err
}

func (d *daemon) reloadLocked(ctx context.Context) ([]string, error) {
	cfg, err := config.Load(d.cfgPath)
	if err != nil {
		return nil, err
	}
	cfg.Audit.AcceptBreak = d.cfg.Audit.AcceptBreak // a flag, not a key
	ids, err := identity.New(cfg.Identities)
	if err != nil {
		return nil, err
	}
	// A new engine, so that the bundle is checked against the identities
	// before either takes effect; the running one decides until then.
	engine, err := policy.New(ctx, cfg.Policy, d.log)
	if err != nil {
		return nil, fmt.Errorf("load policy: %w", err)
	}
	if err := checkIdentities(d.cfgPath, cfg.Identities, engine); err != nil {
		return nil, err
	}
	// The credential rules are checked against the internal: entries being
	// loaded, before the running floor takes them.
	nextFloor, err := dnsguard.NewFloor(cfg.Internal)
	if err != nil {
		return nil, fmt.Errorf("internal: %w", err)
	}
	if err := checkCredentials(d.cfgPath, cfg, engine, nextFloor); err != nil {
		return nil, err
	}
	// Re-read on every reload, changed or not: a rotated file or
	// variable is a new value under the same config.
	secrets, err := cfg.LoadSecrets()
	if err != nil {
		return nil, err
	}
	if !reflect.DeepEqual(cfg.Internal, d.cfg.Internal) {
		// Validated by config.Load, so this does not fail half-way.
		if err := d.floor.Update(cfg.Internal); err != nil {
			return nil, err
		}
		d.res.Flush()
	}
	d.secrets.Set(secrets)
	for _, l := range d.listeners() {
		l.Reload(engine, ids)
	}
	d.engine.Store(engine)
	d.policyInfo.Loaded(engine.Digest(), time.Now())
	pending := restartNeeded(d.cfg, cfg, d.inspectConfigured)
	if len(pending) > 0 {
		d.log.Warn(admin.RestartNeeded(pending), zap.Strings("sections", pending))
	}
	next := *d.cfg
	next.Identities, next.Internal, next.Policy, next.Secrets = cfg.Identities, cfg.Internal, cfg.Policy, cfg.Secrets
	d.cfg = &next
	d.log.Info("reloaded", zap.String("policy", engine.Digest()), zap.Int("identities", ids.Len()), zap.Int("secrets", secrets.Len()))
	return pending, nil
}

// restartNeeded names the sections that differ between the running and the
// reloaded configuration but only take effect at start, and the identities'
// configured CA roots if they differ from those opened at start (a reload
// takes identities, but not their roots).
func restartNeeded(running, loaded *config.Config, openedRoots map[string]ca.Files) []string {
	var out []string
	for _, s := range []struct {
		name string
		a, b any
	}{
		{"log", running.Log, loaded.Log},
		{"proxy", running.Proxy, loaded.Proxy},
		{"admin", running.Admin, loaded.Admin},
		{"metrics", running.Metrics, loaded.Metrics},
		{"dns", running.DNS, loaded.DNS},
		{"audit", running.Audit, loaded.Audit},
		{"postgres", running.Postgres, loaded.Postgres},
		{"inspect", running.Inspect, loaded.Inspect},
	} {
		if !reflect.DeepEqual(s.a, s.b) {
			out = append(out, s.name)
		}
	}
	if !maps.Equal(openedRoots, loaded.InspectOptions().Configured) {
		out = append(out, "identities ca_cert/ca_key")
	}
	return out
}

// listenerFields are the serving line's listeners, each by name with the
// address it is bound to: the proxy and admin always, dns and postgres
// when configured. A listener added later (a metrics-only one) belongs
// here too, so that one line says everything egressd listens on.
func listenerFields(proxyLn, adminLn net.Listener, dnsPC net.PacketConn, dnsLn, gateLn, metricsLn net.Listener) []zap.Field {
	fs := []zap.Field{zap.String("proxy", proxyLn.Addr().String()), zap.String("admin", adminLn.Addr().String())}
	if dnsPC != nil {
		fs = append(fs, zap.String("dns", dnsPC.LocalAddr().String()))
		// Only a port of 0 in dns.listen gives TCP another port.
		if tcp := dnsLn.Addr().String(); tcp != dnsPC.LocalAddr().String() {
			fs = append(fs, zap.String("dns_tcp", tcp))
		}
	}
	if gateLn != nil {
		fs = append(fs, zap.String("postgres", gateLn.Addr().String()))
	}
	if metricsLn != nil {
		fs = append(fs, zap.String("metrics", metricsLn.Addr().String()))
	}
	return fs
}
