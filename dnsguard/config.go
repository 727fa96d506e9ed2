// Package dnsguard makes the proxy's address checks true: it classifies every
// address, resolves names so that what is checked is exactly what is dialled,
// pins the vetted addresses in its dialer, and serves filtered DNS to
// sandboxes.
package dnsguard

import (
	"cmp"
	"fmt"
	"net/netip"
	"time"

	"github.com/egressd/egressd/internal/defaults"
)

// Config is the `dns:` section. A zero value means the default the field
// documents; Provision fills them in.
type Config struct {
	// Upstreams are the resolvers egressd asks ("host:port" with an IP
	// host). If empty, the nameservers of /etc/resolv.conf are used.
	Upstreams []string `yaml:"upstreams"`
	// Timeout bounds one try against one upstream. If zero, 2s is used.
	Timeout time.Duration `yaml:"timeout"`
	// Attempts is how many times each upstream is tried, in rotation. If
	// zero, 2 is used.
	Attempts int `yaml:"attempts"`
	// MaxCNAME bounds the CNAME chain followed for one name. If zero, 8 is
	// used.
	MaxCNAME int `yaml:"max_cname"`
	// MinTTL and MaxTTL clamp how long an answer is cached. If MaxTTL is
	// zero, 300s is used; MinTTL zero honours TTL 0 (no caching).
	MinTTL time.Duration `yaml:"min_ttl"`
	MaxTTL time.Duration `yaml:"max_ttl"`
	// NegativeTTL is how long NXDOMAIN, empty and denied answers are cached
	// at most. If zero, 30s is used.
	NegativeTTL time.Duration `yaml:"negative_ttl"`
	// CacheSize bounds the cache (names). If zero, 10000 is used.
	CacheSize int `yaml:"cache_size"`

	// Listen is the sandbox-facing DNS address (UDP and TCP). If empty, no
	// DNS listener starts.
	Listen string `yaml:"listen"`
	// Refuse is the answer for a name the policy refuses: "refused" or
	// "nxdomain". If empty, refused is used.
	Refuse string `yaml:"refuse"`
	// AnswerTTL caps the TTL of answers served to sandboxes. If zero, 60s
	// is used.
	AnswerTTL time.Duration `yaml:"answer_ttl"`
	// RateLimit is each client's sustained queries per second, Burst its
	// burst. If zero, 100 and 200 are used.
	RateLimit float64 `yaml:"rate_limit"`
	Burst     int     `yaml:"burst"`
	// SteerTo, when set, is the address of egressd's transparent
	// listener that every allowed name is answered with (DNS steering,
	// opt-in), instead of the name's addresses, so that a client with no
	// proxy setting connects to egressd, which decides the connection by
	// the name it carries: an A answer for an IPv4 address, AAAA for IPv6,
	// the other type empty. If empty, answers carry the vetted addresses.
	SteerTo string `yaml:"steer_to"`
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Timeout:     2 * time.Second,
		Attempts:    2,
		MaxCNAME:    8,
		MaxTTL:      300 * time.Second,
		NegativeTTL: 30 * time.Second,
		CacheSize:   10000,
		Refuse:      "refused",
		AnswerTTL:   60 * time.Second,
		RateLimit:   100,
		Burst:       200,
	}
}

// Provision replaces every zero value with its default from DefaultConfig,
// so a zero key in the file and a Config built in code both get the
// documented values. It runs before Validate.
func (c *Config) Provision() {
	defaults.Fill(c, DefaultConfig())
}

// Validate checks a provisioned Config without I/O. Errors name the key
// relative to the section.
func (c *Config) Validate() error {
	for i, u := range c.Upstreams {
		if _, err := netip.ParseAddrPort(u); err != nil {
			return fmt.Errorf("upstreams[%d] must be IP:port, got %q", i, u)
		}
	}
	if c.Listen != "" {
		if _, err := netip.ParseAddrPort(c.Listen); err != nil {
			return fmt.Errorf("listen must be IP:port, got %q", c.Listen)
		}
	}
	if err := cmp.Or(
		defaults.NonNegative("timeout", c.Timeout),
		defaults.NonNegative("min_ttl", c.MinTTL),
		defaults.NonNegative("max_ttl", c.MaxTTL),
		defaults.NonNegative("negative_ttl", c.NegativeTTL),
		defaults.NonNegative("answer_ttl", c.AnswerTTL),
	); err != nil {
		return err
	}
	if c.MaxTTL != 0 && c.MinTTL > c.MaxTTL {
		return fmt.Errorf("min_ttl must be <= max_ttl (%s), got %q", c.MaxTTL, c.MinTTL)
	}
	if err := cmp.Or(
		defaults.Between("attempts", c.Attempts, 0, 10),
		defaults.Between("max_cname", c.MaxCNAME, 0, 32),
		defaults.Between("cache_size", c.CacheSize, 0, 1<<24),
		defaults.Between("burst", c.Burst, 0, 1<<20),
		defaults.NonNegative("rate_limit", c.RateLimit),
	); err != nil {
		return err
	}
	if c.Refuse != "" && c.Refuse != "refused" && c.Refuse != "nxdomain" {
		return fmt.Errorf("refuse must be refused or nxdomain, got %q", c.Refuse)
	}
	if c.SteerTo != "" {
		if a, err := netip.ParseAddr(c.SteerTo); err != nil || a.Zone() != "" || a.IsUnspecified() {
			return fmt.Errorf("steer_to must be an IP address, got %q", c.SteerTo)
		}
	}
	return nil
}
