package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStartChecksAgree is issue 25's "would serve accept this?": one table
// of configs, bundles and files that serve refuses, and for each, serve,
// serve --check, policy check --config and policy test --config all refuse
// with exit 2 and the same message; the good config all three checks
// accept, writing nothing.
func TestStartChecksAgree(t *testing.T) {
	const key = "startcheck-test-key-0123456789"
	t.Setenv("STARTCHECK_KEY", key)
	// A rule that sends secret k to api.example.com, over TLS (inspected)
	// unless port says otherwise.
	credRule := func(port string) string {
		return `{"rules": [{"id": "api", "hosts": ["api.example.com"], "ports": [` + port + `], "inspect": true,` +
			` "credentials": [{"secret": "k", "header": "Authorization", "format": "Bearer {}"}]}]}`
	}
	const secretEnv = "secrets:\n  - name: k\n    env: STARTCHECK_KEY\n"
	tests := []struct {
		name string
		// yaml is the config after the listeners, audit.dir and
		// policy.dir (DIR is the test's directory).
		yaml string
		data string            // the bundle's data.json
		file map[string]string // files to write under DIR (a name ending in / is a directory)
		mode map[string]os.FileMode
		want string // in the message of every refusal; "" for the good case
	}{
		{"good", secretEnv, credRule("443"), nil, nil, ""},
		{"secret_not_in_config", strings.Replace(secretEnv, "name: k", "name: other", 1), credRule("443"), nil, nil,
			`rules[0].credentials[0].secret "k" is not in the config's secrets`},
		{"cleartext_credential", secretEnv, strings.Replace(credRule("80"), `"inspect": true,`, "", 1), nil, nil,
			`binds credentials but would send them in cleartext`},
		{"secret_file_unreadable", "secrets:\n  - name: k\n    file: DIR/key/\n", credRule("443"),
			map[string]string{"key/": ""}, nil, "secrets[0].file"},
		{"secret_file_too_short", "secrets:\n  - name: k\n    file: DIR/key\n", credRule("443"),
			map[string]string{"key": "short"}, nil, "shorter than 8 bytes"},
		{"ca_dir_writable_by_others", secretEnv + "inspect:\n  ca_dir: DIR/ca\n", credRule("443"),
			map[string]string{"ca/": ""}, map[string]os.FileMode{"ca": 0o777}, "writable by others"},
		{"signing_key_missing", secretEnv + "audit:\n  signing_key: DIR/nokey.pem\n", credRule("443"), nil, nil,
			"audit.signing_key"},
		{"ocsf_directory_missing", secretEnv + "audit:\n  export:\n    ocsf: DIR/nodir/ocsf.jsonl\n", credRule("443"), nil, nil,
			"audit.export.ocsf"},
		{"postgres_password_file_missing", secretEnv + "postgres:\n  listen: 127.0.0.1:3\n  upstream: host=127.0.0.1 user=app\n  password_file: DIR/nopw\n",
			credRule("443"), nil, nil, "postgres.password_file"},
		{"listener_address", strings.Replace(secretEnv, "secrets:", "dns:\n  listen: nowhere\nsecrets:", 1), credRule("443"), nil, nil,
			"dns.listen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			bundle := filepath.Join(dir, "bundle")
			if code, _, errb := runCLI("policy", "init", bundle); code != 0 {
				t.Fatalf("policy init: exit %d: %s", code, errb)
			}
			files := map[string]string{"bundle/data.json": tt.data}
			for name, body := range tt.file {
				files[name] = body
			}
			for name, body := range files {
				p := filepath.Join(dir, name)
				var err error
				if strings.HasSuffix(name, "/") {
					err = os.Mkdir(p, 0o700)
				} else {
					err = os.WriteFile(p, []byte(body), 0o600)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			for name, mode := range tt.mode {
				if err := os.Chmod(filepath.Join(dir, name), mode); err != nil {
					t.Fatal(err)
				}
			}
			yaml := "proxy:\n  listen: 127.0.0.1:1\nadmin:\n  listen: 127.0.0.1:2\npolicy:\n  dir: " + bundle + "\n" + tt.yaml
			if !strings.Contains(yaml, "audit:") {
				yaml += "audit:\n  dir: DIR/audit\n"
			} else {
				yaml = strings.Replace(yaml, "audit:\n", "audit:\n  dir: DIR/audit\n", 1)
			}
			cfg := writeConfig(t, dir, strings.ReplaceAll(yaml, "DIR", dir))
			commands := [][]string{
				{"serve", "--check", "--config", cfg},
				{"policy", "check", "--config", cfg},
				{"policy", "test", "--config", cfg},
			}
			if tt.want != "" {
				// serve itself refuses before it binds or serves.
				commands = append(commands, []string{"serve", "--config", cfg})
			}
			var first string
			for _, args := range commands {
				var stdout, stderr bytes.Buffer
				err := run(args, &stdout, &stderr)
				if tt.want == "" {
					if err != nil {
						t.Fatalf("egressd %s = %v; want it to accept the config", strings.Join(args[:2], " "), err)
					}
					if !strings.Contains(stdout.String(), "serve would start") {
						t.Errorf("egressd %s said %q; want it to say serve would start", strings.Join(args[:2], " "), stdout.String())
					}
					continue
				}
				var ee *exitError
				if !errors.As(err, &ee) || ee.code != 2 {
					t.Fatalf("egressd %s = %v; want exit 2", strings.Join(args[:2], " "), err)
				}
				msg := err.Error()
				if !strings.Contains(msg, tt.want) {
					t.Errorf("egressd %s refused with %q; want it to say %q", strings.Join(args[:2], " "), msg, tt.want)
				}
				if first == "" {
					first = msg
				} else if msg != first {
					t.Errorf("egressd %s refused with %q; want serve --check's %q", strings.Join(args[:2], " "), msg, first)
				}
			}
			// The checks wrote nothing: no audit log, no CA directory.
			if tt.want == "" {
				for _, d := range []string{"audit", "egressd-ca"} {
					if _, err := os.Stat(filepath.Join(dir, d)); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("after the checks, %s: %v; want it not to exist", d, err)
					}
				}
			}
		})
	}
}
