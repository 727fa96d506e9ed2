package config

import (
	"fmt"
	"net/netip"
)

// validateLoopback refuses an admin address that a sandbox could reach:
// reload and metrics are operator-only.
func validateLoopback(listen string) error {
	ap, err := netip.ParseAddrPort(listen)
	if err != nil {
		return fmt.Errorf("listen must be IP:port, got %q: %w", listen, err)
	}
	if !ap.Addr().IsLoopback() {
		return fmt.Errorf("listen must be a loopback address, got %q", listen)
	}
	return nil
}

// validateMetrics checks the metrics-only listener, which may bind any
// address but must not share one with another listener.
func (c *Config) validateMetrics() error {
	if c.Metrics.Listen == "" {
		return nil
	}
	if _, err := netip.ParseAddrPort(c.Metrics.Listen); err != nil {
		return fmt.Errorf("metrics.listen must be IP:port, got %q: %w", c.Metrics.Listen, err)
	}
	for _, other := range []struct{ key, addr string }{
		{"admin.listen", c.Admin.Listen},
		{"proxy.listen", c.Proxy.Listen},
		{"dns.listen", c.DNS.Listen},
		{"postgres.listen", c.Postgres.Listen},
	} {
		if other.addr == c.Metrics.Listen {
			return fmt.Errorf("metrics.listen must differ from %s, both are %q", other.key, other.addr)
		}
	}
	return nil
}

// validateArrivals checks the proxy's optional SOCKS5 and transparent
// listeners: each must differ from every other listener (their format is
// proxy.Config's to check); and DNS steering needs a transparent listener
// to steer to.
func (c *Config) validateArrivals() error {
	if c.DNS.SteerTo != "" && c.Proxy.TransparentListen == "" {
		return fmt.Errorf("dns.steer_to is set (%q) but proxy.transparent_listen is not: steered clients would reach no listener", c.DNS.SteerTo)
	}
	all := []struct{ key, addr string }{
		{"proxy.listen", c.Proxy.Listen},
		{"proxy.socks_listen", c.Proxy.SOCKSListen},
		{"proxy.transparent_listen", c.Proxy.TransparentListen},
		{"admin.listen", c.Admin.Listen},
		{"dns.listen", c.DNS.Listen},
		{"postgres.listen", c.Postgres.Listen},
		{"metrics.listen", c.Metrics.Listen},
	}
	for i, a := range all[1:3] {
		if a.addr == "" {
			continue
		}
		for j, other := range all {
			if j != i+1 && other.addr == a.addr {
				return fmt.Errorf("%s must differ from %s, both are %q", a.key, other.key, a.addr)
			}
		}
	}
	return nil
}
