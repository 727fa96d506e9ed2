package generation

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/egressd/egressd/policy"
)

// SetBundle puts f, a bundle fetched from policy.bundle_url and verified,
// in force in place of the one deciding: compiled and tested with the
// grants in force (policy.New), checked against the config in force as
// Build checks a bundle (identities, credential rules), archived, then
// handed to the listeners, one change at a time with reloads and grants.
// A bundle that fails any step is refused and the one in force stays. The
// config file is not read again, nor are the secrets.
func (r *Running) SetBundle(ctx context.Context, f *policy.Fetched) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.cur.Load()
	cfg := *cur.Config
	cfg.Policy.Fetched = f
	cfg.Policy.Grants = r.grants
	engine, err := policy.New(ctx, cfg.Policy, r.o.Log)
	if err != nil {
		return r.o.Secrets.Load().Redact(err)
	}
	if err := checkEngine(&cfg, r.o.Path, engine, cur.Floor, r.o.Log); err != nil {
		return r.o.Secrets.Load().Redact(err)
	}
	archive(engine, r.o.AuditDir, r.o.Log)
	r.fetched = f
	r.putInForce(cur.withEngine(&cfg, engine))
	r.o.Policy.Loaded(engine.Digest(), time.Now())
	r.o.Log.Info("policy bundle from the bundle service in force", zap.String("policy", engine.Digest()), zap.String("bundle_url", f.Source))
	return nil
}

// keepBundleService puts started's bundle source (dir and the bundle_*
// keys) back into p, the policy section a reload read, when either fetches
// from a bundle service and they differ, and reports whether it did: the
// bundle source is set up at start, so a change to it, or between a
// directory and a service, waits for a restart. Between two directories,
// a reload changes the directory as it always has.
func keepBundleService(p *policy.Config, started policy.Config) bool {
	if p.BundleURL == "" && started.BundleURL == "" {
		return false
	}
	if bundleSource(*p) == bundleSource(started) {
		return false
	}
	p.Dir, p.BundleURL, p.BundleVerification, p.BundleCAFile = started.Dir, started.BundleURL, started.BundleVerification, started.BundleCAFile
	p.BundlePollMin, p.BundlePollMax = started.BundlePollMin, started.BundlePollMax
	p.BundleLongPoll, p.BundleStartTimeout = started.BundleLongPoll, started.BundleStartTimeout
	return true
}

// serviceKeys are the policy keys that say where the bundle comes from.
type serviceKeys struct {
	dir, url, caFile                  string
	verification                      policy.BundleVerification
	pollMin, pollMax, longPoll, start time.Duration
}

func bundleSource(p policy.Config) serviceKeys {
	return serviceKeys{dir: p.Dir, url: p.BundleURL, caFile: p.BundleCAFile, verification: p.BundleVerification,
		pollMin: p.BundlePollMin, pollMax: p.BundlePollMax, longPoll: p.BundleLongPoll, start: p.BundleStartTimeout}
}
