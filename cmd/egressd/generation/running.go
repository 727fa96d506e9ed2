package generation

import (
	"context"
	"maps"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/dnsguard"
	"github.com/egressd/egressd/internal/admin"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/internal/metrics"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/broker"
	"github.com/egressd/egressd/proxy/ca"
)

// Reloader is what a reload asks of each listener (proxy, DNS, Postgres):
// take the new policy and identities for new requests, queries and
// statements.
type Reloader interface {
	Reload(d policy.Decider, ids *identity.Store)
}

// Options are what a reload reaches besides the generation.
type Options struct {
	// Path is the config file a reload re-reads; "" the embedded defaults.
	Path string
	// Log is where reloads are reported, and the policy engines' logger.
	Log *zap.Logger
	// Flush empties the resolver's cache after internal: changed: its
	// answers were classified by the old entries. If nil, none is flushed.
	Flush func()
	// Secrets is the store the logger scrubs with and the proxy adds
	// credentials from; a reload sets the new values in it.
	Secrets *broker.Store
	// Listeners take each new generation's policy and identities. If
	// empty, none does.
	Listeners []Reloader
	// Policy exports the digest and load time of the bundle in force.
	Policy *metrics.Policy
	// Reloads counts reloads by result ("ok", "failed").
	Reloads *prometheus.CounterVec
	// AuditDir is the audit directory whose bundle archive
	// (policy.ArchiveDir) keeps every bundle put in force. If empty, none
	// is archived.
	AuditDir string
	// OpenedRoots are the identities' configured CA roots opened at start
	// (a reload takes identities, but not their roots). If nil, none were.
	OpenedRoots map[string]ca.Files
}

// Running holds the generation in force. A reload builds the next from the
// config file and swaps it in only once the whole of it has been built and
// checked: a config, bundle or secret that fails leaves the one in force
// deciding, as if the reload had not been asked for.
type Running struct {
	o Options
	// started is the config at start: its sections other than identities,
	// internal, policy and secrets stay in force until a restart.
	started *config.Config
	// floor is the floor the resolver and the dialers hold: the first
	// generation's, updated in place when internal: changes.
	floor *dnsguard.Floor
	// mu makes reloads and grant changes one at a time.
	mu  sync.Mutex
	cur atomic.Pointer[Generation]
	// grants are the grants in force, which a reload keeps.
	grants []policy.Grant
	// fetched is the bundle from policy.bundle_url in force, which a
	// reload keeps; nil for a local bundle.
	fetched *policy.Fetched
}

// NewRunning puts first in force (archived like every reloaded bundle);
// the listeners were built with it and serve nothing yet.
func NewRunning(first *Generation, o Options) *Running {
	r := &Running{o: o, started: first.Config, floor: first.Floor, grants: first.Config.Policy.Grants,
		fetched: first.Config.Policy.Fetched}
	archive(first.Engine, o.AuditDir, o.Log)
	r.cur.Store(first)
	o.Policy.Loaded(first.Engine.Digest(), time.Now())
	return r
}

// Current is the generation in force.
func (r *Running) Current() *Generation { return r.cur.Load() }

// Reload re-reads the config file, the secrets' files and variables and
// the policy bundle. Identities, internal:, secrets and the policy take
// effect for new requests and dials; changes to any other section need a
// restart and are named in a warning. A config or bundle that fails to
// load is refused and the generation in force stays. It returns the
// sections that changed but wait for a restart.
func (r *Running) Reload(ctx context.Context) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// No code quotes a secret's value; redacting what a reload reports
	// (the log, POST /-/reload's answer) is the last guard.
	pending, err := r.reloadLocked(ctx)
	err = r.o.Secrets.Load().Redact(err)
	result := "ok"
	if err != nil {
		result = "failed"
	}
	r.o.Reloads.WithLabelValues(result).Inc()
	return pending, err
}

func (r *Running) reloadLocked(ctx context.Context) ([]string, error) {
	cfg, err := config.Load(r.o.Path)
	if err != nil {
		return nil, err
	}
	cfg.Audit.AcceptBreak = r.started.Audit.AcceptBreak // a flag, not a key
	cfg.Policy.Grants = r.grants                        // state, not a key
	bundlePending := keepBundleService(&cfg.Policy, r.started.Policy)
	cfg.Policy.Fetched = r.fetched // state, not a key
	// Re-read on every reload, changed or not: a rotated file or variable
	// is a new value under the same config.
	next, err := Build(ctx, cfg, r.o.Path, Serving, r.o.Log)
	if err != nil {
		return nil, err
	}
	if !reflect.DeepEqual(cfg.Internal, r.cur.Load().Config.Internal) {
		// Build made a floor of the same entries, so this does not fail
		// half-way.
		if err := r.floor.Update(cfg.Internal); err != nil {
			return nil, err
		}
		if r.o.Flush != nil {
			r.o.Flush()
		}
	}
	// Archived before it decides anything: every digest a record names
	// can then be loaded again (policy replay, audit explain).
	archive(next.Engine, r.o.AuditDir, r.o.Log)
	r.o.Secrets.Set(next.Secrets)
	r.putInForce(next)
	r.o.Policy.Loaded(next.Engine.Digest(), time.Now())
	pending := restartNeeded(r.started, cfg, r.o.OpenedRoots)
	if bundlePending {
		pending = append(pending, "policy dir/bundle_*")
	}
	if len(pending) > 0 {
		r.o.Log.Warn(admin.RestartNeeded(pending), zap.Strings("sections", pending))
	}
	r.o.Log.Info("reloaded", zap.String("policy", next.Engine.Digest()), zap.Int("identities", next.Identities.Len()),
		zap.Int("secrets", next.Secrets.Len()))
	return pending, nil
}

// SetGrants puts grants in force in place of the current ones: the bundle
// in force is compiled and tested with them (policy.Engine.WithGrants),
// then commit runs, and only if both succeed do the listeners take the
// new engine, which re-decides their open tunnels as a reload does. commit
// is where the caller makes the change durable and audited; if it fails,
// nothing changes. Neither the config file nor the bundle directory is
// read again.
func (r *Running) SetGrants(ctx context.Context, grants []policy.Grant, commit func() error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.cur.Load()
	engine, err := cur.Engine.WithGrants(ctx, grants)
	if err != nil {
		return err
	}
	if err := commit(); err != nil {
		return err
	}
	cfg := *cur.Config
	cfg.Policy.Grants = grants
	r.grants = grants
	r.putInForce(cur.withEngine(&cfg, engine))
	r.o.Log.Info("grants applied", zap.Int("grants", len(grants)), zap.String("policy", engine.Digest()))
	return nil
}

// archive keeps e's bundle in auditDir's bundle archive. A failure is
// logged, not returned: the bundle still decides, and only a later replay
// of its records lacks it.
func archive(e *policy.Engine, auditDir string, log *zap.Logger) {
	if auditDir == "" {
		return
	}
	if _, err := e.Archive(policy.ArchiveDir(auditDir)); err != nil {
		log.Warn("bundle not archived: policy replay and audit explain cannot load it", zap.String("policy", e.Digest()), zap.Error(err))
	}
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

// putInForce makes next the generation in force: every listener decides
// with its engine and identities before Current returns it.
func (r *Running) putInForce(next *Generation) {
	for _, l := range r.o.Listeners {
		l.Reload(next.Engine, next.Identities)
	}
	r.cur.Store(next)
}

// withEngine is g with another engine, built from cfg: a grant or a
// fetched bundle changes the policy and nothing else of a generation.
func (g *Generation) withEngine(cfg *config.Config, engine *policy.Engine) *Generation {
	next := *g
	next.Config, next.Engine = cfg, engine
	return &next
}
