// Package dnsguard makes the proxy's address checks true: it classifies every
// address, resolves names so that what is checked is exactly what is dialled,
// pins the vetted addresses in its dialer, and serves filtered DNS to
// sandboxes.
package dnsguard

// Config is the `dns:` section.
type Config struct {
	// Upstreams are the resolvers egressd asks ("host:port"). If empty, the
	// nameservers of /etc/resolv.conf are used.
	Upstreams []string `yaml:"upstreams"`
	// Listen is the sandbox-facing DNS address (UDP and TCP). If empty, no
	// DNS listener starts.
	Listen string `yaml:"listen"`
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config { return Config{} }

// Validate checks values without I/O. Errors name the key relative to the
// section.
func (c *Config) Validate() error { return nil }
