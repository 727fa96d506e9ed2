package policy

import (
	"cmp"
	"time"

	"github.com/egressd/egressd/internal/defaults"
)

// Config is the `policy:` section.
type Config struct {
	// Dir is a bundle directory (.rego modules plus data.json/data.yaml).
	// If empty (and BundleURL is empty), the bundle embedded from rego/ is
	// used.
	Dir string `yaml:"dir"`
	// BundleURL is an OPA bundle service's bundle (https://host/path), used
	// instead of Dir: polled with ETag / If-None-Match, verified against
	// BundleVerification, compiled and tested like a local bundle. If
	// empty, none is fetched.
	BundleURL string `yaml:"bundle_url"`
	// BundleVerification is the key signed bundles are verified with. If
	// empty, BundleURL is refused unless BundleVerification.InsecureUnsigned.
	BundleVerification BundleVerification `yaml:"bundle_verification"`
	// BundleCAFile is a PEM file of the CA roots the bundle service's
	// certificate is verified against. If empty, the system roots.
	BundleCAFile string `yaml:"bundle_ca_file"`
	// BundlePollMin and BundlePollMax bound the wait between two polls of
	// BundleURL (jittered between them; a failed poll backs off up to
	// BundlePollMax). If zero, 10s and 60s are used.
	BundlePollMin time.Duration `yaml:"bundle_poll_min"`
	BundlePollMax time.Duration `yaml:"bundle_poll_max"`
	// BundleLongPoll is how long the bundle service may hold a poll open
	// waiting for a new revision (OPA long polling, for services that
	// support it). If zero, no long polling.
	BundleLongPoll time.Duration `yaml:"bundle_long_poll"`
	// BundleStartTimeout bounds how long serve waits at start for the
	// first verified bundle; nothing listens meanwhile, and serve exits
	// with the last error if none came. If zero, 60s is used.
	BundleStartTimeout time.Duration `yaml:"bundle_start_timeout"`
	// CacheSize bounds the decision cache (entries). If zero, 10000 is used;
	// -1 disables caching.
	CacheSize int `yaml:"cache_size"`
	// EvalTimeout bounds one Rego evaluation; past it the decision is a deny
	// with reason "policy_timeout". If zero, 100ms is used.
	EvalTimeout time.Duration `yaml:"eval_timeout"`
	// Grants are the live time-bound grants, appended to data.rules as
	// allow rules. Not a config key: serve and check read them from the
	// grants file (audit.dir/grants.json). If nil, none.
	Grants []Grant `yaml:"-"`

	// Tests, when set, lets a load skip the bundle's Rego tests for a
	// bundle it says already passed them, and hears of every bundle whose
	// tests pass. Set by `check`, never from the file; if nil (serve,
	// reload, policy test), every load runs the tests.
	Tests TestLedger `yaml:"-"`

	// Fetched is the bundle serve's bundle source fetched from BundleURL
	// and verified, loaded in place of Dir. Not a config key; if nil with
	// BundleURL set, New refuses: there is no bundle to decide with yet.
	Fetched *Fetched `yaml:"-"`
}

// TestLedger remembers which bundles passed their Rego tests. Passed must
// answer false whenever in doubt: a false answer costs a test run, a wrong
// true one lets a bundle with failing tests decide.
type TestLedger interface {
	// Passed reports whether the bundle with this digest passed its
	// tests under the running build.
	Passed(digest string) bool
	// Record notes that the bundle with this digest passed. A failure to
	// record is the ledger's to swallow: the next load runs the tests.
	Record(digest string)
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{CacheSize: 10000, EvalTimeout: 100 * time.Millisecond,
		BundlePollMin: 10 * time.Second, BundlePollMax: 60 * time.Second, BundleStartTimeout: 60 * time.Second}
}

// Provision replaces the zero values with their defaults from
// DefaultConfig. It runs before Validate.
func (c *Config) Provision() {
	defaults.Fill(c, DefaultConfig())
}

// Validate checks a provisioned Config without I/O. Errors name the key
// relative to the section.
func (c *Config) Validate() error {
	return cmp.Or(
		defaults.AtLeast("cache_size", c.CacheSize, -1),
		defaults.Positive("eval_timeout", c.EvalTimeout),
		c.validateBundleService(),
	)
}
