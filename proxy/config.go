package proxy

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/egressd/egressd/internal/defaults"
)

// Config is the `proxy:` section. Its defaults protect a 2-core box. A zero
// value means the default DefaultConfig shows; Provision fills them in.
type Config struct {
	// Listen is the proxy address. If empty, 127.0.0.1:3128 is used.
	Listen string `yaml:"listen"`
	// SOCKSListen is the SOCKS5 listener's address (RFC 1928 CONNECT,
	// decided as a CONNECT). If empty, there is none.
	SOCKSListen string `yaml:"socks_listen"`
	// TransparentListen is the transparent listener's address: the
	// connections the network redirects to egressd (REDIRECT, TPROXY) or
	// egressd's DNS steers there (dns.steer), decided by the name their
	// first flight carries. If empty, there is none.
	TransparentListen string `yaml:"transparent_listen"`
	// MaxHeaderBytes bounds a client's request head. If zero, 32 KiB is used.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// ReadHeaderTimeout bounds reading a request head (slowloris). If zero,
	// 10s is used.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// IdleTimeout closes a client keep-alive connection idle this long. If
	// zero, 60s is used.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// DialTimeout bounds resolving and connecting upstream. If zero, 10s is
	// used.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// ResponseHeaderTimeout bounds waiting for an upstream response head.
	// If zero, 30s is used.
	ResponseHeaderTimeout time.Duration `yaml:"response_header_timeout"`
	// BodyIdleTimeout bounds each read of a request or response body. If zero,
	// 60s is used.
	BodyIdleTimeout time.Duration `yaml:"body_idle_timeout"`
	// MaxIdleConnsPerHost bounds the upstream keep-alive pool per identity
	// and host. If zero, 64 is used.
	MaxIdleConnsPerHost int `yaml:"max_idle_conns_per_host"`
	// MaxIdleConns bounds the whole upstream keep-alive pool. If zero, 512 is
	// used.
	MaxIdleConns int `yaml:"max_idle_conns"`
	// PeekTimeout bounds waiting for a tunnel's first client bytes (the TLS
	// ClientHello). If zero, 10s is used.
	PeekTimeout time.Duration `yaml:"peek_timeout"`
	// TunnelIdleTimeout closes a tunnel with no bytes either way this long.
	// If zero, 5m is used.
	TunnelIdleTimeout time.Duration `yaml:"tunnel_idle_timeout"`
	// TunnelMaxLifetime closes any tunnel this old. If zero, 24h is used.
	TunnelMaxLifetime time.Duration `yaml:"tunnel_max_lifetime"`
	// TunnelCopy is how an opaque tunnel moves its bytes: "splice"
	// (splice(2) through a kernel pipe, the bytes never in egressd's
	// memory) or "buffer" (read and written through a 256 KiB buffer per
	// direction, taken from a pool only while bytes flow: up to 512 KiB
	// per busy tunnel). Which is faster, and which costs less CPU, depends
	// on the kernel and the network (README, File descriptors). If empty,
	// "splice" is used.
	TunnelCopy string `yaml:"tunnel_copy"`
	// MaxConns caps client connections (plain and tunnels together); past
	// it new connections are closed on accept. If zero, 10000 is used.
	MaxConns int `yaml:"max_conns"`
	// PerIdentityMaxConns caps one identity's in-flight requests plus open
	// tunnels. If zero, 2000 is used.
	PerIdentityMaxConns int `yaml:"per_identity_max_conns"`
	// PerIdentityRate is one identity's sustained requests per second (token
	// bucket). If zero, 2000 is used.
	PerIdentityRate float64 `yaml:"per_identity_rate"`
	// PerIdentityBurst is the token bucket size. If zero, 4000 is used.
	PerIdentityBurst int `yaml:"per_identity_burst"`
	// PerSourceRefusalRate is how many refusals per second a client
	// address may earn before it is authenticated (407, 400); past it
	// (and PerSourceRefusalBurst) its requests are refused with
	// source_rate_limited before their credentials are checked, and the
	// connection is closed. If zero, 20 is used.
	PerSourceRefusalRate float64 `yaml:"per_source_refusal_rate"`
	// PerSourceRefusalBurst is that bucket's size. If zero, 100 is used.
	PerSourceRefusalBurst int `yaml:"per_source_refusal_burst"`
	// DrainTimeout is how long SIGTERM waits for in-flight requests,
	// tunnels and Postgres gate sessions before cutting them (each cut is
	// recorded shutting_down). If zero, 30s is used.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
}

// The values of Config.TunnelCopy.
const (
	TunnelCopySplice = "splice"
	TunnelCopyBuffer = "buffer"
)

// tunnelCopyBuf is the size of a "buffer" tunnel's copy buffer.
const tunnelCopyBuf = 256 << 10

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Listen:                "127.0.0.1:3128",
		MaxHeaderBytes:        32 << 10,
		ReadHeaderTimeout:     10 * time.Second,
		IdleTimeout:           60 * time.Second,
		DialTimeout:           10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		BodyIdleTimeout:       60 * time.Second,
		MaxIdleConnsPerHost:   64,
		MaxIdleConns:          512,
		PeekTimeout:           10 * time.Second,
		TunnelIdleTimeout:     5 * time.Minute,
		TunnelMaxLifetime:     24 * time.Hour,
		TunnelCopy:            TunnelCopySplice,
		MaxConns:              10000,
		PerIdentityMaxConns:   2000,
		PerIdentityRate:       2000,
		PerIdentityBurst:      4000,
		PerSourceRefusalRate:  20,
		PerSourceRefusalBurst: 100,
		DrainTimeout:          30 * time.Second,
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
	if _, err := netip.ParseAddrPort(c.Listen); err != nil {
		return fmt.Errorf("listen must be IP:port, got %q: %w", c.Listen, err)
	}
	for _, l := range []struct{ key, addr string }{{"socks_listen", c.SOCKSListen}, {"transparent_listen", c.TransparentListen}} {
		if l.addr == "" {
			continue
		}
		if _, err := netip.ParseAddrPort(l.addr); err != nil {
			return fmt.Errorf("%s must be IP:port, got %q: %w", l.key, l.addr, err)
		}
	}
	if c.TunnelCopy != TunnelCopySplice && c.TunnelCopy != TunnelCopyBuffer {
		return fmt.Errorf("tunnel_copy must be %q or %q, got %q", TunnelCopySplice, TunnelCopyBuffer, c.TunnelCopy)
	}
	durations := []struct {
		key string
		v   time.Duration
	}{
		{"read_header_timeout", c.ReadHeaderTimeout},
		{"idle_timeout", c.IdleTimeout},
		{"dial_timeout", c.DialTimeout},
		{"response_header_timeout", c.ResponseHeaderTimeout},
		{"body_idle_timeout", c.BodyIdleTimeout},
		{"peek_timeout", c.PeekTimeout},
		{"tunnel_idle_timeout", c.TunnelIdleTimeout},
		{"tunnel_max_lifetime", c.TunnelMaxLifetime},
		{"drain_timeout", c.DrainTimeout},
	}
	for _, d := range durations {
		if d.v <= 0 {
			return fmt.Errorf("%s must be > 0, got %q", d.key, d.v)
		}
	}
	ints := []struct {
		key string
		v   int
	}{
		{"max_header_bytes", c.MaxHeaderBytes},
		{"max_idle_conns_per_host", c.MaxIdleConnsPerHost},
		{"max_idle_conns", c.MaxIdleConns},
		{"max_conns", c.MaxConns},
		{"per_identity_max_conns", c.PerIdentityMaxConns},
		{"per_identity_burst", c.PerIdentityBurst},
		{"per_source_refusal_burst", c.PerSourceRefusalBurst},
	}
	for _, n := range ints {
		if n.v <= 0 {
			return fmt.Errorf("%s must be > 0, got %d", n.key, n.v)
		}
	}
	if c.PerIdentityRate <= 0 {
		return fmt.Errorf("per_identity_rate must be > 0, got %v", c.PerIdentityRate)
	}
	if c.PerSourceRefusalRate <= 0 {
		return fmt.Errorf("per_source_refusal_rate must be > 0, got %v", c.PerSourceRefusalRate)
	}
	return nil
}
