package policy

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestLoadRefusesMissingOrEmptyPolicyDir: a policy.dir that does not exist,
// is a file, or holds no entry point fails the load with the key and what
// to do, rather than "stat .: no such file" or a bundle that denies
// everything no_decision (item 17).
func TestLoadRefusesMissingOrEmptyPolicyDir(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent")
	file := filepath.Join(t.TempDir(), "policy.rego")
	if err := os.WriteFile(file, []byte(miniHTTP), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, dir string
		want      []string
	}{
		{"missing", missing, []string{`policy.dir "` + missing + `" does not exist`, "egressd policy init"}},
		{"a file", file, []string{`policy.dir "` + file + `" is not a directory`, "egressd policy init"}},
		{"empty", t.TempDir(), []string{"no .rego module declaring an entry point", "egressd policy init"}},
		{"data only", writeBundle(t, "", map[string]string{"data.json": `{"rules": []}`}), []string{"no .rego module declaring an entry point"}},
		{"no entry point", writeBundle(t, "", map[string]string{"lib.rego": "package lib\n\nx := 1\n"}), []string{"no .rego module declaring an entry point"}},
		{"only tests", writeBundle(t, "", map[string]string{"http_test.rego": "package egress.http_test\n\ntest_x if true\n"}), []string{"no .rego module declaring an entry point"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(context.Background(), Config{Dir: tt.dir, EvalTimeout: testEvalTimeout}, zap.NewNop())
			for _, w := range tt.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("New(dir %s) error = %v; want it to contain %q", tt.name, err, w)
				}
			}
		})
	}
}

// TestLoadRefusesLowerCaseMethods: "get" in a rule's methods never matches
// a request (methods are case-sensitive); the load fails naming the file,
// the key and the spelling to write (item 17).
func TestLoadRefusesLowerCaseMethods(t *testing.T) {
	dir := writeBundle(t, "", map[string]string{"http.rego": miniHTTP,
		"data.json": `{"rules": [{"id": "docs", "hosts": ["a.test"], "ports": [80], "methods": ["GET", "post"]}]}`})
	_, err := Check(context.Background(), os.DirFS(dir))
	want := `data.json: rules[0].methods[1] must be upper-case, got "post", which no request matches: write "POST" (rule "docs")`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Check error = %v; want it to contain %q", err, want)
	}
}

// TestLoadRefusesUnknownSQLProfile: data.sql.identities naming a profile
// that data.sql.profiles lacks fails the load (its statements would all
// be denied sql_no_profile), and CheckIdentity reports an identity
// attribute that does (item 17).
func TestLoadRefusesUnknownSQLProfile(t *testing.T) {
	dir := writeBundle(t, "", map[string]string{"http.rego": miniHTTP,
		"sql/data.json": `{"profiles": {"read_only": {}, "read_write": {}}, "identities": {"agent": "read_olny"}}`})
	_, err := Check(context.Background(), os.DirFS(dir))
	want := `sql/data.json: sql.identities["agent"] names SQL profile "read_olny", which sql.profiles lacks (have read_only, read_write)`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Check error = %v; want it to contain %q", err, want)
	}

	e := newTestEngine(t, Config{})
	for _, tt := range []struct {
		attrs map[string]string
		want  string
	}{
		{nil, ""},
		{map[string]string{"sql_profile": "read_only"}, ""},
		{map[string]string{"sql_profile": "read_olny"}, `attributes.sql_profile "read_olny" is not a profile of the policy bundle's data.sql.profiles (have read_only, read_write)`},
	} {
		err := e.CheckIdentity(Identity{ID: "agent", Attributes: tt.attrs})
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("CheckIdentity(%v) = %v; want %q", tt.attrs, err, tt.want)
		}
	}
}

// TestDataJSONErrorsNamePosition: a data file that is not JSON is reported
// at file:line:column (item 17).
func TestDataJSONErrorsNamePosition(t *testing.T) {
	tests := []struct {
		name, file, data, want string
	}{
		{"trailing comma", "data.json", "{\n  \"rules\": [\n    {\"id\": \"a\",}\n  ]\n}\n", "data.json:3:16: invalid character '}'"},
		{"unquoted key", "sql/data.json", "{\n profiles: {}}", "sql/data.json:2:2: invalid character 'p'"},
		{"truncated", "data.json", "{\"rules\": [", "data.json:1:11: unexpected end of file"},
		{"two values", "data.json", "{}\n\n  {}", "data.json:3:3: unexpected data after the top-level value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeBundle(t, "", map[string]string{"http.rego": miniHTTP, tt.file: tt.data})
			_, err := Check(context.Background(), os.DirFS(dir))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Check(%q) error = %v; want it to contain %q", tt.data, err, tt.want)
			}
		})
	}
}

// TestLoadChecksInspect: "inspect" loads on an allow rule of names, and is
// refused where it cannot mean anything (a deny rule), contradicts the rule
// ("tls": false), or would let a client have a leaf minted for any address
// of a range (a CIDR).
func TestLoadChecksInspect(t *testing.T) {
	tests := []struct {
		name, rule, want string
	}{
		{"allow rule", `{"id": "gh", "hosts": ["api.github.com", "*.example.com", "192.0.2.1"], "ports": [443], "paths": ["/repos/**"], "inspect": true}`, ""},
		{"deny rule", `{"id": "d", "hosts": ["a.test"], "ports": [443], "action": "deny", "inspect": true}`, `rules[0].inspect must not be set on a deny rule`},
		{"tls false", `{"id": "p", "hosts": ["a.test"], "ports": [443], "tls": false, "inspect": true}`, `rules[0].inspect needs TLS in the tunnel, but tls is false`},
		{"cidr", `{"id": "c", "hosts": ["192.0.2.0/24"], "ports": [443], "inspect": true}`, `rules[0].hosts[0] "192.0.2.0/24": inspect needs names or IPs, not a CIDR`},
		{"not a bool", `{"id": "b", "hosts": ["a.test"], "ports": [443], "inspect": "yes"}`, `rules: json: cannot unmarshal string`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeBundle(t, "", map[string]string{"http.rego": miniHTTP, "data.json": `{"rules": [` + tt.rule + `]}`})
			_, err := Check(context.Background(), os.DirFS(dir))
			if tt.want == "" {
				if err != nil {
					t.Errorf("Check(%s) = %v; want nil", tt.rule, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Check(%s) error = %v; want it to contain %q", tt.rule, err, tt.want)
			}
		})
	}
}
