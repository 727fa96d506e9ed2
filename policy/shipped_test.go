package policy

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	defaultbundle "github.com/egressd/egressd/rego"
)

// indexTest is default_test.rego's index check, added to each operator
// bundle below: egressd's index of any rules is the one the fixtures'
// index_of builds, so the shipped tests' mocked index means what the
// loaded one does.
const indexTest = `package egress.index_test

import data.egress.fixtures

test_index_of_matches_loaded_index if {
	fixtures.index_of(fixtures.loaded_rules) == data.rule_index
}
`

// narrowedSQL is the default sql/data.json with the read_only profile cut
// to one database and schema and read_write gone, as an operator might.
func narrowedSQL(t *testing.T) string {
	t.Helper()
	b, err := defaultbundle.FS.ReadFile("sql/data.json")
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	profiles := d["profiles"].(map[string]any)
	ro := profiles["read_only"].(map[string]any)
	ro["databases"], ro["read"], ro["functions"] = []string{"app"}, []string{"app.*"}, []string{}
	delete(profiles, "read_write")
	d["identities"] = map[string]string{"agent": "read_only"}
	if b, err = json.Marshal(d); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestShippedTestsPassOnAnyRules runs the tests `egressd policy init`
// writes over very different data.json (and sql/data.json) files: they
// decide on their own fixture data, so no operator rule or SQL profile may
// make them fail (a failing test refuses the bundle at start and on every
// reload).
func TestShippedTestsPassOnAnyRules(t *testing.T) {
	for _, tc := range []struct{ name, data, sql string }{
		{"no rules key", `{}`, ""},
		{"empty rules", `{"rules": []}`, ""},
		{"every IPv4 address", `{"rules": [{"id": "all", "hosts": ["0.0.0.0/0"], "ports": [443]}]}`, ""},
		{"every address", `{"rules": [{"id": "v4", "hosts": ["0.0.0.0/0"], "ports": [80, 443]}, {"id": "v6", "hosts": ["::/0"], "ports": [443]}]}`, ""},
		{"wildcards over the fixture names", `{"rules": [{"id": "w", "hosts": ["*.test", "*.mixed.test"], "ports": [80, 443, 22, 5432, 8443]}]}`, ""},
		{"fixture names, other shapes", `{"rules": [
			{"id": "exact", "hosts": ["exact.test", "api.test", "post.test", "nowhere.test"], "ports": [443, 80], "methods": ["PUT"]},
			{"id": "wild", "hosts": ["wild.test", "evilwild.test"], "ports": [443], "identities": ["team"]},
			{"id": "ips", "hosts": ["192.0.2.7", "198.51.101.9", "2001:db8::7"], "ports": [443], "tls": false}]}`, ""},
		{"deny rules", `{"rules": [
			{"id": "deny-all", "hosts": ["0.0.0.0/0", "::/0"], "ports": [443], "action": "deny"},
			{"id": "deny-test", "hosts": ["*.test", "exact.test", "team.test"], "ports": [443, 80], "paths": ["/**"], "action": "deny"},
			{"id": "allow", "hosts": ["a.wild.test"], "ports": [443]}]}`, ""},
		{"narrowed SQL profiles", `{"rules": []}`, narrowedSQL(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := defaultbundle.Write(dir, true); err != nil {
				t.Fatal(err)
			}
			files := map[string]string{"data.json": tc.data, "index_test.rego": indexTest}
			if tc.sql != "" {
				files["sql/data.json"] = tc.sql
			}
			writeBundle(t, dir, files)
			n, err := Test(context.Background(), os.DirFS(dir))
			var te *TestError
			if errors.As(err, &te) {
				for _, f := range te.Failures {
					t.Errorf("%s: %s failed (%v)", f.Location, f.Name, f.Err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Test(%s) = %v", filepath.Base(dir), err)
			}
			if n == 0 {
				t.Fatal("Test ran no tests")
			}
		})
	}
}
