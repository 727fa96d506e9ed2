package policy

import (
	"cmp"
	"time"

	"github.com/egressd/egressd/internal/defaults"
)

// Config is the `policy:` section.
type Config struct {
	// Dir is a bundle directory (.rego modules plus data.json/data.yaml).
	// If empty, the bundle embedded from rego/ is used.
	Dir string `yaml:"dir"`
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
	return Config{CacheSize: 10000, EvalTimeout: 100 * time.Millisecond}
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
	)
}
