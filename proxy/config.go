// Package proxy is the HTTP forward proxy and CONNECT tunnel that sandboxes
// set as HTTP_PROXY: every request is identified, decided by policy, dialled
// only to a vetted address, and audited before anything goes upstream.
package proxy

import (
	"fmt"
	"net/netip"
)

// Config is the `proxy:` section.
type Config struct {
	// Listen is the proxy address. If empty, 127.0.0.1:3128 is used.
	Listen string `yaml:"listen"`
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config { return Config{Listen: "127.0.0.1:3128"} }

// Validate checks values without I/O. Errors name the key relative to the
// section.
func (c *Config) Validate() error {
	if _, err := netip.ParseAddrPort(c.Listen); err != nil {
		return fmt.Errorf("listen must be IP:port, got %q: %w", c.Listen, err)
	}
	return nil
}
