package ca

import (
	"cmp"
	"time"

	"github.com/egressd/egressd/internal/defaults"
)

// Bounds of inspect.leaf_ttl: a leaf is minted again at half its TTL and
// is backdated 5 minutes, so much shorter would mint on nearly every
// CONNECT; much longer gives a leaked leaf key a long life.
const (
	minLeafTTL = 10 * time.Minute
	maxLeafTTL = 7 * 24 * time.Hour
)

// Config is the `inspect:` section: where the per-identity CAs of HTTPS
// inspection live, how long their leaves last, and whom egressd trusts
// upstream of an inspected tunnel. It is read at start only.
type Config struct {
	// CADir is the CA directory (created 0700 on first start; one root per
	// identity, <id>.crt and <id>.key; read-only shared roots if egressd
	// cannot write it). If empty, egressd-ca next to audit.dir is used
	// (./egressd-ca with the default ./egressd-audit).
	CADir string `yaml:"ca_dir"`
	// UpstreamCAFile is a PEM bundle of the CAs that upstream certificates
	// of inspected tunnels must chain to. If empty, the system roots are
	// used.
	UpstreamCAFile string `yaml:"upstream_ca_file"`
	// LeafTTL is the validity of a minted leaf (10m to 168h). If zero, 6h
	// is used.
	LeafTTL time.Duration `yaml:"leaf_ttl"`
	// LeafCache is how many leaves are kept in memory. If zero, 10000 is
	// used.
	LeafCache int `yaml:"leaf_cache"`
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{CADir: "./egressd-ca", LeafTTL: DefaultLeafTTL, LeafCache: DefaultCacheSize}
}

// Provision replaces zero values by the defaults.
func (c *Config) Provision() { defaults.Fill(c, DefaultConfig()) }

// Validate checks a provisioned Config without I/O. Errors name the key
// relative to the section.
func (c *Config) Validate() error {
	return cmp.Or(
		defaults.Between("leaf_ttl", c.LeafTTL, minLeafTTL, maxLeafTTL),
		defaults.Positive("leaf_cache", c.LeafCache),
	)
}

// Options are the Open options c sets.
func (c *Config) Options() Options {
	return Options{LeafTTL: c.LeafTTL, CacheSize: c.LeafCache}
}
