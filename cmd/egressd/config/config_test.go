package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/egressd/egressd/internal/identity"
)

func TestParseDefaults(t *testing.T) {
	for _, in := range []string{"", "\n", "# only a comment\n", "{}\n"} {
		got, err := Parse([]byte(in))
		if err != nil {
			t.Fatalf("Parse(%q) error = %v; want nil", in, err)
		}
		if want := Default(); !reflect.DeepEqual(got, want) {
			t.Errorf("Parse(%q) = %+v; want defaults %+v", in, got, want)
		}
	}
}

func TestParseOverridesOnlyWhatIsSet(t *testing.T) {
	got, err := Parse([]byte("proxy:\n  listen: 127.0.0.1:4128\n"))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got.Proxy.Listen != "127.0.0.1:4128" {
		t.Errorf("proxy.listen = %q; want 127.0.0.1:4128", got.Proxy.Listen)
	}
	if want := Default().Admin.Listen; got.Admin.Listen != want {
		t.Errorf("admin.listen = %q; want default %q", got.Admin.Listen, want)
	}
}

func TestParseErrorsNameTheKey(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"unknown top-level key", "proxxy: {}\n", "proxxy: unknown key"},
		{"unknown nested key", "proxy:\n  lisen: 1\n", "proxy.lisen: unknown key"},
		{"bad duration", "audit:\n  sync_interval: soon\n", `audit.sync_interval: want a duration such as 10ms, 5s, 1m or 1h30m, got "soon" (line 2)`},
		{"bad list item", "identities:\n  - id: a\n    sources: 5\n", "identities[0].sources: cannot unmarshal"},
		{"negative duration", "audit:\n  sync_interval: -1s\n", `audit.sync_interval must be > 0, got "-1s"`},
		{"bad sync mode", "audit:\n  sync: sometimes\n", `audit.sync must be "interval" or "always", got "sometimes"`},
		{"bad log level", "log:\n  level: loud\n", `log.level must be debug, info, warn or error, got "loud"`},
		{"admin not loopback", "admin:\n  listen: 0.0.0.0:9090\n", `admin.listen must be a loopback address, got "0.0.0.0:9090"`},
		{"admin equals proxy", "admin:\n  listen: 127.0.0.1:3128\n", "admin.listen must differ from proxy.listen"},
		{"bad metrics listen", "metrics:\n  listen: :9091\n", `metrics.listen must be IP:port, got ":9091"`},
		{"metrics equals admin", "metrics:\n  listen: 127.0.0.1:9090\n", `metrics.listen must differ from admin.listen, both are "127.0.0.1:9090"`},
		{"bad proxy listen", "proxy:\n  listen: localhost\n", `proxy.listen must be IP:port, got "localhost"`},
		{"bad socks listen", "proxy:\n  socks_listen: :1080\n", `proxy.socks_listen must be IP:port, got ":1080"`},
		{"bad tunnel copy", "proxy:\n  tunnel_copy: sendfile\n", `proxy.tunnel_copy must be "splice" or "buffer", got "sendfile"`},
		{"socks equals proxy", "proxy:\n  socks_listen: 127.0.0.1:3128\n", `proxy.socks_listen must differ from proxy.listen, both are "127.0.0.1:3128"`},
		{"transparent equals socks", "proxy:\n  socks_listen: 127.0.0.1:1080\n  transparent_listen: 127.0.0.1:1080\n", `proxy.socks_listen must differ from proxy.transparent_listen, both are "127.0.0.1:1080"`},
		{"steer address not an IP", "dns:\n  steer_to: egressd\n", `dns.steer_to must be an IP address, got "egressd"`},
		{"steer with no transparent listener", "dns:\n  steer_to: 10.0.0.2\n", `dns.steer_to is set ("10.0.0.2") but proxy.transparent_listen is not`},
		{"transparent equals admin", "proxy:\n  transparent_listen: 127.0.0.1:9090\n", `proxy.transparent_listen must differ from admin.listen`},
		{"bad token hash", "identities:\n  - id: a\n    token_sha256: abc\n", `identities[0].token_sha256 must be 64 hex digits`},
		{"duplicate identity", "identities:\n  - id: a\n    sources: [10.0.0.0/8]\n  - id: a\n", `identities[1].id "a" is listed twice`},
		{"bad source", "identities:\n  - id: a\n    sources: [10.0.0.1]\n", `identities[0].sources[0] must be a CIDR, got "10.0.0.1"`},
		{"policy cache", "policy:\n  cache_size: -2\n", "policy.cache_size must be >= -1, got -2"},
		{"leaf ttl too short", "inspect:\n  leaf_ttl: 1m\n", `inspect.leaf_ttl must be between 10m0s and 168h0m0s, got "1m0s"`},
		{"leaf ttl too long", "inspect:\n  leaf_ttl: 720h\n", `inspect.leaf_ttl must be between`},
		{"negative leaf cache", "inspect:\n  leaf_cache: -1\n", "inspect.leaf_cache must be > 0, got -1"},
		{"ca_cert without ca_key", "identities:\n  - id: a\n    sources: [10.0.0.0/8]\n    ca_cert: /c.pem\n", `identities[0] (id "a") sets only one of ca_cert and ca_key`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse(%q) error = %v; want it to contain %q", tt.in, err, tt.want)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(t.TempDir() + "/absent.yaml")
	if err == nil || !strings.Contains(err.Error(), "read config") {
		t.Errorf("Load(absent) error = %v; want a read config error", err)
	}
}

// TestParseNeverEchoesSecrets: an error about a secret-bearing key names
// the key and never prints the value, which is often the secret pasted in
// the wrong place (item 16).
func TestParseNeverEchoesSecrets(t *testing.T) {
	const secret = "Hunter2-S3cret-Pasted"
	tests := []struct {
		name, in, key string
	}{
		{"raw token in token_sha256", "identities:\n  - id: a\n    token_sha256: " + secret + "\n", "identities[0].token_sha256"},
		{"password in scram_sha256", "identities:\n  - id: a\n    scram_sha256: " + secret + "\n", "identities[0].scram_sha256"},
		{"password in postgres.upstream URL", "postgres:\n  listen: 127.0.0.1:6432\n  upstream: postgres://app:" + secret + "@db/x\n", "postgres.upstream"},
		{"password in postgres.upstream keywords", "postgres:\n  listen: 127.0.0.1:6432\n  upstream: host=db password=" + secret + "\n", "postgres.upstream"},
		{"password in postgres.password_env", "postgres:\n  listen: 127.0.0.1:6432\n  upstream: host=db\n  password_env: " + secret + "\n", "postgres.password_env"},
		{"password in postgres.password_file", "postgres:\n  listen: 127.0.0.1:6432\n  upstream: host=db\n  password_file: \"" + secret + "\\n\"\n", "postgres.password_file"},
		{"PEM in postgres.tls_key", "postgres:\n  listen: 127.0.0.1:6432\n  upstream: host=db\n  tls_cert: /c.pem\n  tls_key: \"-----BEGIN PRIVATE KEY-----\\n" + secret + "\"\n", "postgres.tls_key"},
		{"secret in secrets[].env", "secrets:\n  - name: gh\n    env: " + secret + "\n", "secrets[0].env"},
		{"secret in secrets[].file", "secrets:\n  - name: gh\n    file: \"" + secret + "\\n\"\n", "secrets[0].file"},
		{"PEM in identities[].ca_key", "identities:\n  - id: a\n    sources: [10.0.0.0/8]\n    ca_cert: /c.pem\n    ca_key: \"-----BEGIN PRIVATE KEY-----\\n" + secret + "\"\n", "identities[0].ca_key"},
		{"PEM in audit.signing_key", "audit:\n  signing_key: |\n    -----BEGIN PRIVATE KEY-----\n    " + secret + "\n    -----END PRIVATE KEY-----\n", "audit.signing_key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.key) {
				t.Fatalf("Parse error = %v; want one naming %s", err, tt.key)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "S3cret") {
				t.Errorf("Parse error = %q; it echoes the secret", err)
			}
		})
	}
}

// TestRedact: Redact replaces each secret-bearing value a message quotes
// by the key's name, and leaves errors.As working.
func TestRedact(t *testing.T) {
	c := Default()
	c.Postgres.PasswordFile = "/run/Hunter2Secret"
	c.Audit.SigningKey = "MC4CAQAwBQYDK2VwBCIEIKeyMaterial"
	inner := &os.PathError{Op: "open", Path: c.Audit.SigningKey, Err: os.ErrNotExist}
	err := c.Redact(fmt.Errorf("open audit log: %w", inner))
	want := "open audit log: open <audit.signing_key: not shown>: file does not exist"
	if err.Error() != want {
		t.Errorf("Redact() = %q; want %q", err, want)
	}
	var pe *os.PathError
	if !errors.As(err, &pe) {
		t.Errorf("errors.As(Redact(err), *os.PathError) = false; want true")
	}
	if plain := errors.New("nothing secret"); c.Redact(plain) != plain {
		t.Errorf("Redact(plain) changed an error that quotes no secret")
	}
}

// TestParseNeverNamesInsideSecrets: a pasted value that YAML reads as a
// mapping or list is reported at the secret key, never by the keys inside
// it, which are the secret.
func TestParseNeverNamesInsideSecrets(t *testing.T) {
	const secret = "S3cretToken"
	for _, in := range []string{
		"identities:\n  - id: a\n    token_sha256: {" + secret + ": x}\n",
		"identities:\n  - id: a\n    token_sha256:\n      " + secret + ": x\n",
		"identities:\n  - id: a\n    scram_sha256: [" + secret + "]\n",
		"audit:\n  signing_key:\n    " + secret + ": x\n",
		"secrets:\n  - name: gh\n    env: {" + secret + ": x}\n",
	} {
		_, err := Parse([]byte(in))
		if err == nil || strings.Contains(err.Error(), secret) {
			t.Errorf("Parse(%q) error = %v; want an error that does not quote the value", in, err)
		}
	}
}

// TestSecretPathsMatchSecretKeys keeps secretPath (for messages built from
// the YAML tree) in step with secretKeys.
func TestSecretPathsMatchSecretKeys(t *testing.T) {
	c := Default()
	c.Identities = make([]identity.Entry, 12)
	for _, k := range c.secretKeys() {
		if !secretPath.MatchString(k.key) {
			t.Errorf("secretPath does not match secret key %s", k.key)
		}
	}
}

// TestCADirDefaultsNextToAuditDir: an empty inspect.ca_dir is egressd-ca
// beside audit.dir, so a config that moves its state (a test's temporary
// directory, a volume) moves its CA too.
func TestCADirDefaultsNextToAuditDir(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"embedded defaults", "", "./egressd-ca"},
		{"relative audit dir", "audit:\n  dir: state/audit\n", "state/egressd-ca"},
		{"absolute audit dir", "audit:\n  dir: /var/lib/egressd/audit/\n", "/var/lib/egressd/egressd-ca"},
		{"explicit ca_dir", "audit:\n  dir: /a/audit\ninspect:\n  ca_dir: /etc/egressd-ca\n", "/etc/egressd-ca"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if c.Inspect.CADir != tt.want {
				t.Errorf("inspect.ca_dir = %q; want %q", c.Inspect.CADir, tt.want)
			}
		})
	}
}

// TestMetricsListenMayBindAnyAddress: the metrics-only listener may bind a
// non-loopback address (Prometheus scrapes it from another pod) while the
// admin listener, which reloads and profiles, still may not.
func TestMetricsListenMayBindAnyAddress(t *testing.T) {
	c, err := Parse([]byte("metrics:\n  listen: 0.0.0.0:9091\n"))
	if err != nil {
		t.Fatalf("Parse(metrics.listen 0.0.0.0:9091) = %v; want accepted", err)
	}
	if c.Metrics.Listen != "0.0.0.0:9091" {
		t.Errorf("metrics.listen = %q; want 0.0.0.0:9091", c.Metrics.Listen)
	}
	if Default().Metrics.Listen != "" {
		t.Errorf("default metrics.listen = %q; want empty (no metrics-only listener)", Default().Metrics.Listen)
	}
	if _, err := Parse([]byte("admin:\n  listen: 0.0.0.0:9090\nmetrics:\n  listen: 0.0.0.0:9091\n")); err == nil {
		t.Error("Parse(admin.listen 0.0.0.0:9090) = nil; want the admin listener kept on loopback")
	}
}
