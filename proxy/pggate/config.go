package pggate

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/egressd/egressd/internal/defaults"
)

// Config is the `postgres:` section. A zero value means the default the
// field documents; Provision fills them in.
type Config struct {
	// Listen is the gate's address. If empty, the gate does not start.
	Listen string `yaml:"listen"`
	// Upstream is the database server as a libpq URL or key=value string
	// (host, port, user, sslmode, …). The client's database name replaces
	// any dbname. It must not carry a password. It has no default: it is
	// required when Listen is set.
	Upstream string `yaml:"upstream"`
	// PasswordEnv names the environment variable holding the upstream
	// password. If empty, PasswordFile is used.
	PasswordEnv string `yaml:"password_env"`
	// PasswordFile is a file whose first line is the upstream password. If
	// both are empty, the upstream is expected not to ask for one.
	PasswordFile string `yaml:"password_file"`
	// SearchPath is the schema unqualified relation names resolve to; the
	// gate pins the upstream session's search_path to it. If empty,
	// "public" is used.
	SearchPath string `yaml:"search_path"`
	// TLSCert and TLSKey enable TLS for clients that ask for it (PEM
	// files). If empty, SSLRequest is answered 'N'.
	TLSCert string `yaml:"tls_cert"`
	TLSKey  string `yaml:"tls_key"`
	// MaxMessageBytes caps one client protocol message. If zero, 8 MiB is
	// used.
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// MaxUpstreamMessageBytes caps one server message (a row); a larger
	// one ends the session with SQLSTATE 54000 naming this key. The relay
	// streams messages through fixed buffers, so this bounds what a client
	// is sent, not the gate's memory. If zero, 256 MiB is used.
	MaxUpstreamMessageBytes int `yaml:"max_upstream_message_bytes"`
	// MaxQueryBytes, MaxNesting and MaxOperators bound the SQL handed to
	// the parser; past them a query is denied sql_too_complex. If zero,
	// 1 MiB, 256 and 2000 are used.
	MaxQueryBytes int `yaml:"max_query_bytes"`
	MaxNesting    int `yaml:"max_nesting"`
	MaxOperators  int `yaml:"max_operators"`
	// StartupTimeout bounds TLS, startup and authentication of a client,
	// and the upstream login. If zero, 10s is used.
	StartupTimeout time.Duration `yaml:"startup_timeout"`
	// IdleTimeout ends a session whose client or server sends nothing for
	// this long. If zero, 1h is used.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxStatements caps the statements of one Query or Parse; a query
	// with more is denied sql_too_many_statements as a whole, with one
	// audit record. If zero, 100 is used.
	MaxStatements int `yaml:"max_statements"`
	// MaxSessions caps the gate's open sessions (each holds one upstream
	// connection); past it a login is refused with SQLSTATE 53300 and
	// audited session_limit. If zero, 64 is used, but never more than half
	// the upstream's max_connections (read at the first login), so the
	// gate alone cannot exhaust the server.
	MaxSessions int `yaml:"max_sessions"`
	// MaxSessionsPerIdentity caps one identity's open sessions, so one
	// sandbox cannot take every upstream slot. If zero, 16 is used, but
	// never more than a quarter of the upstream's max_connections.
	MaxSessionsPerIdentity int `yaml:"max_sessions_per_identity"`
	// CacheSize bounds the per-query decision cache (entries); -1 disables
	// it. If zero, 10000 is used.
	CacheSize int `yaml:"cache_size"`
	// CatalogTTL is how long a database's catalog snapshot (its functions,
	// operators and casts outside pg_catalog) is used before it is read
	// again: by the next login to that database, or in the background when
	// an open session finds it older; a reload reads every snapshot again.
	// Decisions also re-read a snapshot older than catalogMaxAge unless the
	// change trigger is installed (catalogfresh.go); then CatalogTTL is
	// also how long a failed or trigger-less LISTEN attempt waits to be
	// tried again. If zero, 1m is used.
	CatalogTTL time.Duration `yaml:"catalog_ttl"`
	// TrustedExtensions are extensions whose functions, operators and casts
	// count as built-ins: a call or operator that reaches them needs no
	// qualified allow, and their bare names in a function set allow them.
	// Extensions such as citext, hstore or PostGIS define = and other
	// common operators, which otherwise make every statement that applies
	// them reach the extension's functions. If empty, none.
	TrustedExtensions []string `yaml:"trusted_extensions"`
}

// DefaultConfig returns the documented defaults (the gate disabled).
func DefaultConfig() Config {
	return Config{
		SearchPath:              "public",
		MaxMessageBytes:         8 << 20,
		MaxUpstreamMessageBytes: 256 << 20,
		MaxQueryBytes:           1 << 20,
		MaxNesting:              256,
		MaxOperators:            2000,
		StartupTimeout:          10 * time.Second,
		IdleTimeout:             time.Hour,
		CacheSize:               10000,
		MaxStatements:           100,
		CatalogTTL:              time.Minute,
	}
}

// Provision replaces every zero value with its default from DefaultConfig,
// so a zero key in the file and a Config built in code both get the
// documented values. It runs before Validate. MaxSessions and
// MaxSessionsPerIdentity stay zero: their default depends on the
// upstream's max_connections, learnt at the first login (sessionCaps).
func (c *Config) Provision() {
	defaults.Fill(c, DefaultConfig())
}

// Validate checks a provisioned Config without I/O. Errors name the key
// relative to the section.
func (c *Config) Validate() error {
	if c.Listen == "" {
		return nil
	}
	if _, err := netip.ParseAddrPort(c.Listen); err != nil {
		return fmt.Errorf("listen must be IP:port, got %q: %w", c.Listen, err)
	}
	if c.Upstream == "" {
		return fmt.Errorf("upstream must be set when listen is set")
	}
	if strings.Contains(strings.ToLower(c.Upstream), "password") || strings.Contains(upstreamUserinfo(c.Upstream), ":") {
		return fmt.Errorf("upstream must not carry a password; use password_env or password_file")
	}
	if c.PasswordEnv != "" && c.PasswordFile != "" {
		return fmt.Errorf("password_env and password_file are exclusive, got both")
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return fmt.Errorf("tls_cert and tls_key must be set together")
	}
	if strings.ContainsAny(c.SearchPath, ",\"' \x00") {
		return fmt.Errorf("search_path must be one schema name, got %q", c.SearchPath)
	}
	for _, v := range []struct {
		key string
		n   int
	}{
		{"max_message_bytes", c.MaxMessageBytes}, {"max_upstream_message_bytes", c.MaxUpstreamMessageBytes},
		{"max_query_bytes", c.MaxQueryBytes}, {"max_nesting", c.MaxNesting}, {"max_operators", c.MaxOperators},
		{"max_statements", c.MaxStatements}, {"max_sessions", c.MaxSessions},
		{"max_sessions_per_identity", c.MaxSessionsPerIdentity},
	} {
		if v.n < 0 {
			return fmt.Errorf("%s must be >= 0, got %d", v.key, v.n)
		}
	}
	if c.StartupTimeout < 0 {
		return fmt.Errorf("startup_timeout must be >= 0, got %q", c.StartupTimeout)
	}
	if c.IdleTimeout < 0 {
		return fmt.Errorf("idle_timeout must be >= 0, got %q", c.IdleTimeout)
	}
	if c.CatalogTTL < 0 {
		return fmt.Errorf("catalog_ttl must be >= 0, got %q", c.CatalogTTL)
	}
	if c.CacheSize < -1 {
		return fmt.Errorf("cache_size must be >= -1, got %d", c.CacheSize)
	}
	return nil
}

// upstreamUserinfo returns the userinfo of a URL-form upstream, where a
// ':' would introduce a password.
func upstreamUserinfo(s string) string {
	rest, ok := strings.CutPrefix(s, "postgres://")
	if !ok {
		rest, ok = strings.CutPrefix(s, "postgresql://")
	}
	if !ok {
		return ""
	}
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		return rest[:i]
	}
	return ""
}
