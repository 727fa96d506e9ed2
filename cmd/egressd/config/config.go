// Package config is egressd's one YAML file: decoded strictly, provisioned
// (every zero value becomes its documented default), then validated
// without I/O. Each section's type, defaults and Provision are owned by the
// package that uses it; this package only composes them.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"go.uber.org/zap/zapcore"
	"gopkg.in/yaml.v3"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/dnsguard"
	"github.com/egressd/egressd/internal/admin"
	"github.com/egressd/egressd/internal/defaults"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy"
	"github.com/egressd/egressd/proxy/broker"
	"github.com/egressd/egressd/proxy/ca"
	"github.com/egressd/egressd/proxy/pggate"
)

// Config is the whole file. Every key has a default, and a zero value (an
// absent key, 0, 0s or "") means that default in every section, so an
// empty file (or none) is a working configuration.
type Config struct {
	Log    Log             `yaml:"log"`
	Proxy  proxy.Config    `yaml:"proxy"`
	Admin  Admin           `yaml:"admin"`
	Policy policy.Config   `yaml:"policy"`
	DNS    dnsguard.Config `yaml:"dns"`
	Audit  audit.Config    `yaml:"audit"`
	// Metrics is the optional metrics-only listener Prometheus scrapes.
	Metrics Metrics `yaml:"metrics"`
	// Postgres is the Postgres gate; it starts only when postgres.listen
	// is set.
	Postgres pggate.Config `yaml:"postgres"`
	// Inspect is where the per-identity CAs of HTTPS inspection live and
	// whom inspected tunnels trust upstream. Read at start only.
	Inspect ca.Config `yaml:"inspect"`
	// Identities are the sandboxes egressd knows. If empty, proxy clients
	// are anonymous (identity id "anonymous") and the Postgres gate admits
	// no one; once any identity is listed, the proxy requires credentials
	// or a source mapping.
	Identities identity.Config `yaml:"identities"`
	// Internal lists the non-public addresses sandboxes may reach (CIDR +
	// ports) and addresses they never may. If empty, no loopback, private,
	// link-local, CGNAT or ULA address is reachable; metadata never is.
	Internal dnsguard.InternalConfig `yaml:"internal"`
	// Secrets are the values credential actions of the policy add to
	// requests (data.rules[i].credentials), each read from a file or an
	// environment variable at start and on every reload, never written
	// here. If empty, no rule may bind credentials.
	Secrets broker.Config `yaml:"secrets"`
}

// Log is the `log:` section: egressd's operational log (not the audit log).
type Log struct {
	// Level is debug, info, warn or error. If empty, info is used.
	Level string `yaml:"level"`
	// Format is json or console. If empty, json is used.
	Format string `yaml:"format"`
}

// Admin is the `admin:` section.
type Admin struct {
	// Listen is the admin address (/healthz, /readyz, /metrics, reload). It
	// must be a loopback address. If empty, 127.0.0.1:9090 is used.
	Listen string `yaml:"listen"`
	// Clients are the bearer tokens (by SHA-256) its authenticated routes
	// accept: `check --server` (scope check) and grants (scope grant). If
	// empty, those routes refuse every request.
	Clients []admin.Client `yaml:"clients"`
}

// Metrics is the `metrics:` section: a listener that serves only /metrics,
// for a Prometheus outside the host or pod. Unlike the admin listener it
// may bind any address, because it offers no reload, profiles or health.
type Metrics struct {
	// Listen is the IP:port to serve /metrics on. If empty, no metrics-only
	// listener starts and /metrics stays on the admin listener alone.
	Listen string `yaml:"listen"`
}

// Default returns the configuration egressd runs with when given no file:
// the zero Config, provisioned.
func Default() *Config {
	c := &Config{}
	c.Provision()
	return c
}

// Provision replaces every zero value of every section with its documented
// default, the one step between decoding and Validate.
func (c *Config) Provision() {
	defaults.Fill(&c.Log, Log{Level: "info", Format: "json"})
	defaults.Fill(&c.Admin, Admin{Listen: "127.0.0.1:9090"})
	c.Proxy.Provision()
	c.Policy.Provision()
	c.DNS.Provision()
	c.Audit.Provision()
	c.Postgres.Provision()
	if c.Inspect.CADir == "" {
		c.Inspect.CADir = caDirNextTo(c.Audit.Dir)
	}
	c.Inspect.Provision()
}

// caDirNextTo is inspect.ca_dir's default: egressd-ca beside audit.dir
// (./egressd-ca beside the default ./egressd-audit), so that one state
// directory holds both and a test's temporary audit directory takes its CA
// with it.
func caDirNextTo(auditDir string) string {
	parent := filepath.Dir(filepath.Clean(auditDir))
	if parent == "." {
		return "./egressd-ca"
	}
	return filepath.Join(parent, "egressd-ca")
}

// InspectOptions are the options of the per-identity CAs: inspect:'s leaf
// settings and the roots identities[] configure (ca_cert, ca_key).
func (c *Config) InspectOptions() ca.Options {
	o := c.Inspect.Options()
	// The identities served: each needs a root when the CA directory is
	// read-only shared roots. With none configured, every client is
	// anonymous.
	if len(c.Identities) == 0 {
		o.Identities = []string{identity.Anonymous.ID}
	}
	for _, e := range c.Identities {
		o.Identities = append(o.Identities, e.ID)
		if e.CACert != "" {
			if o.Configured == nil {
				o.Configured = map[string]ca.Files{}
			}
			o.Configured[e.ID] = ca.Files{Cert: e.CACert, Key: e.CAKey}
		}
	}
	return o
}

// LogFormatOf is the log.format of the config file at path as far as it
// can be read, for reporting an error that stopped Load: "console" only
// when the file says so, else the default "json" (a collector parsing
// JSON lines must not get a plain one).
func LogFormatOf(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "json"
	}
	var c struct {
		Log struct {
			Format string `yaml:"format"`
		} `yaml:"log"`
	}
	if yaml.Unmarshal(b, &c) != nil || c.Log.Format != "console" {
		return "json"
	}
	return "console"
}

// LoadSecrets reads the values of the secrets section (files and the
// environment). Errors name the secret, never a value.
func (c *Config) LoadSecrets() (*broker.Secrets, error) {
	return broker.Load(c.Secrets, os.LookupEnv)
}

// Load reads path, or returns the defaults when path is empty.
func Load(path string) (*Config, error) {
	if path == "" {
		return Default(), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes b strictly, provisions the defaults and validates the
// result.
func Parse(b []byte) (*Config, error) {
	c := &Config{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return nil, nameKeys(b, err)
	}
	c.Provision()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Validate checks every section of a provisioned Config and names the
// failing key in full, e.g. `audit.sync_interval must be > 0, got "-1s"`.
func (c *Config) Validate() error {
	if _, err := zapcore.ParseLevel(c.Log.Level); err != nil {
		return fmt.Errorf("log.level must be debug, info, warn or error, got %q", c.Log.Level)
	}
	if c.Log.Format != "json" && c.Log.Format != "console" {
		return fmt.Errorf("log.format must be json or console, got %q", c.Log.Format)
	}
	if err := validateLoopback(c.Admin.Listen); err != nil {
		return fmt.Errorf("admin.%w", err)
	}
	names := map[string]bool{}
	for i, cl := range c.Admin.Clients {
		if err := cl.Validate(); err != nil {
			return fmt.Errorf("admin.clients[%d]: %w", i, err)
		}
		if names[cl.Name] {
			return fmt.Errorf("admin.clients[%d]: name %q is listed twice", i, cl.Name)
		}
		names[cl.Name] = true
	}
	if err := c.validateMetrics(); err != nil {
		return err
	}
	if err := c.validateSecretShapes(); err != nil {
		return err
	}
	sections := []struct {
		name string
		v    interface{ Validate() error }
	}{
		{"proxy", &c.Proxy},
		{"policy", &c.Policy},
		{"dns", &c.DNS},
		{"audit", &c.Audit},
		{"postgres", &c.Postgres},
		{"inspect", &c.Inspect},
	}
	for _, s := range sections {
		if err := s.v.Validate(); err != nil {
			return fmt.Errorf("%s.%w", s.name, err)
		}
	}
	if err := c.Internal.Validate(); err != nil {
		return fmt.Errorf("internal%w", err)
	}
	if err := c.Identities.Validate(); err != nil {
		return fmt.Errorf("identities%w", err)
	}
	if err := c.Secrets.Validate(); err != nil {
		return fmt.Errorf("secrets%w", err)
	}
	if c.Admin.Listen == c.Proxy.Listen {
		return fmt.Errorf("admin.listen must differ from proxy.listen, both are %q", c.Admin.Listen)
	}
	return c.validateArrivals()
}
