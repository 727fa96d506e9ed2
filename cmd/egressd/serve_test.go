package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeErrorsNeverEchoSecrets: a value that passes the config's checks
// but fails when serve uses it (an unset password_env, a missing
// password_file or signing_key) is reported naming the key, never quoting
// the value, which is often a secret pasted in the wrong place (item 16).
func TestServeErrorsNeverEchoSecrets(t *testing.T) {
	const secret = "Hunter2S3cretPasted"
	if err := os.Unsetenv(secret); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	base := fmt.Sprintf("proxy:\n  listen: 127.0.0.1:1\nadmin:\n  listen: 127.0.0.1:2\naudit:\n  dir: %s\n", filepath.Join(dir, "audit"))
	gate := "postgres:\n  listen: 127.0.0.1:3\n  upstream: host=127.0.0.1 user=app\n"
	cert := filepath.Join(dir, "cert.pem")
	if err := os.WriteFile(cert, []byte("not read past the key's open error"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, yaml, key string
	}{
		{"unset password_env", base + gate + "  password_env: " + secret + "\n", "postgres.password_env"},
		{"missing password_file", base + gate + "  password_file: " + filepath.Join(dir, secret) + "\n", "postgres.password_file"},
		{"missing signing_key", strings.Replace(base, "audit:\n", "audit:\n  signing_key: "+filepath.Join(dir, secret)+"\n", 1), "audit.signing_key"},
		{"missing secrets file", base + "secrets:\n  - name: gh\n    file: " + filepath.Join(dir, secret) + "\n", "secrets[0].file"},
		{"missing tls_key", base + gate + "  tls_cert: " + cert + "\n  tls_key: " + filepath.Join(dir, secret) + "\n", "postgres.tls_key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := writeConfig(t, t.TempDir(), tt.yaml)
			var stdout, stderr bytes.Buffer
			err := run([]string{"serve", "--config", cfg}, &stdout, &stderr)
			if err == nil {
				t.Fatalf("serve started; want a start-up error")
			}
			exitCode(err, &stderr)
			if out := stderr.String(); !strings.Contains(out, tt.key) || strings.Contains(out, secret) {
				t.Errorf("serve output %q; want it to name %s and never quote the value", out, tt.key)
			}
		})
	}
}
