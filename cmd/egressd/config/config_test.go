package config

import (
	"reflect"
	"strings"
	"testing"
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
		{"unknown top-level key", "proxxy: {}\n", "field proxxy not found"},
		{"unknown nested key", "proxy:\n  lisen: 1\n", "field lisen not found"},
		{"bad duration", "audit:\n  sync_interval: soon\n", "audit.sync_interval: cannot unmarshal !!str `soon` into time.Duration (line 2)"},
		{"bad list item", "identities:\n  - id: a\n    sources: 5\n", "identities[0].sources: cannot unmarshal"},
		{"negative duration", "audit:\n  sync_interval: -1s\n", `audit.sync_interval must be > 0, got "-1s"`},
		{"bad sync mode", "audit:\n  sync: sometimes\n", `audit.sync must be "interval" or "always", got "sometimes"`},
		{"bad log level", "log:\n  level: loud\n", `log.level must be debug, info, warn or error, got "loud"`},
		{"admin not loopback", "admin:\n  listen: 0.0.0.0:9090\n", `admin.listen must be a loopback address, got "0.0.0.0:9090"`},
		{"admin equals proxy", "admin:\n  listen: 127.0.0.1:3128\n", "admin.listen must differ from proxy.listen"},
		{"bad proxy listen", "proxy:\n  listen: localhost\n", `proxy.listen must be IP:port, got "localhost"`},
		{"bad token hash", "identities:\n  - id: a\n    token_sha256: abc\n", `identities[0].token_sha256 must be 64 hex digits, got "abc"`},
		{"duplicate identity", "identities:\n  - id: a\n  - id: a\n", `identities[1].id "a" is listed twice`},
		{"bad source", "identities:\n  - id: a\n    sources: [10.0.0.1]\n", `identities[0].sources[0] must be a CIDR, got "10.0.0.1"`},
		{"policy cache", "policy:\n  cache_size: -2\n", "policy.cache_size must be >= -1, got -2"},
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
