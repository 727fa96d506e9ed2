package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egressd/egressd/dnsguard/dnstest"
)

// writeSQLIdentities rewrites the bundle's sql/data.json with identities.
func writeSQLIdentities(t *testing.T, dir string, ids map[string]string) {
	t.Helper()
	p := filepath.Join(dir, "sql", "data.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(b, &data); err != nil {
		t.Fatal(err)
	}
	data["identities"] = ids
	if b, err = json.Marshal(data); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestStartRefusesSilentMistakes: each mistake that used to load and then
// deny everything, or never match, fails `egressd serve` (exit 2) and, for
// bundle mistakes, `egressd policy check`, with a message naming the file,
// the key and what to do (item 17).
func TestStartRefusesSilentMistakes(t *testing.T) {
	good := func(t *testing.T) string {
		return WritePolicy(t, []Rule{{ID: "upstream", Hosts: []string{"upstream.test"}, Ports: []int{80}}})
	}
	tests := []struct {
		name   string
		policy func(t *testing.T) string
		yaml   string
		want   []string
		bundle bool // a bundle mistake: `policy check` refuses it too
	}{
		{name: "missing policy dir", policy: func(t *testing.T) string { return filepath.Join(t.TempDir(), "absent") },
			want: []string{"policy.dir", "does not exist", "egressd policy init"}},
		{name: "empty policy dir", policy: func(t *testing.T) string { return t.TempDir() }, bundle: true,
			want: []string{"no .rego module declaring an entry point", "egressd policy init"}},
		{name: "unknown sql_profile attribute", policy: good,
			yaml: "identities:\n  - id: agent\n    sources: [127.0.0.9/32]\n    attributes: {sql_profile: read_olny}\n",
			want: []string{"egressd.yaml: identities[0].attributes.sql_profile \"read_olny\" is not a profile", "have read_only, read_write"}},
		{name: "unknown profile in data.sql.identities", bundle: true, policy: func(t *testing.T) string {
			dir := good(t)
			writeSQLIdentities(t, dir, map[string]string{"agent": "read_olny"})
			return dir
		}, want: []string{`sql/data.json: sql.identities["agent"] names SQL profile "read_olny"`, "fix the name or add the profile"}},
		{name: "lower-case method", bundle: true, policy: func(t *testing.T) string {
			return WritePolicy(t, []Rule{{ID: "docs", Hosts: []string{"upstream.test"}, Ports: []int{80}, Methods: []string{"get"}}})
		}, want: []string{`data.json: rules[0].methods[0] must be upper-case, got "get"`, `write "GET"`}},
		{name: "identity without credential or source", policy: good,
			yaml: "identities:\n  - id: ghost\n    attributes: {tier: \"1\"}\n",
			want: []string{"egressd.yaml: identities[0] (id \"ghost\") has no token_sha256, scram_sha256 or sources"}},
		{name: "bad JSON in data.json", bundle: true, policy: func(t *testing.T) string {
			dir := good(t)
			if err := os.WriteFile(filepath.Join(dir, "data.json"), []byte("{\n  \"rules\": [\n    {\"id\": \"a\",}\n  ]\n}\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			return dir
		}, want: []string{"data.json:3:16: invalid character '}'"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tt.policy(t)
			e := Start(t, Options{PolicyDir: dir, YAML: tt.yaml, NotReady: true})
			msg := FatalError(t, e)
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("egressd serve's fatal error lacks %q: %s", w, msg)
				}
			}
			if !tt.bundle {
				return
			}
			_, stderr, code := RunCLI(t, "policy", "check", dir)
			if code != 2 || !strings.Contains(stderr, tt.want[0]) {
				t.Errorf("egressd policy check = exit %d, %q; want exit 2 containing %q", code, stderr, tt.want[0])
			}
		})
	}
}

// TestReloadRefusesUnknownSQLProfile: a reload whose identities name a SQL
// profile the bundle lacks is refused, and the running configuration stays
// (item 17).
func TestReloadRefusesUnknownSQLProfile(t *testing.T) {
	id := "identities:\n  - id: agent\n    sources: [127.0.0.9/32]\n    attributes: {sql_profile: %s}\n"
	o := Options{DNS: dnstest.Start(t).Addr(), YAML: strings.Replace(id, "%s", "read_only", 1)}
	e := Start(t, o)
	o.YAML = strings.Replace(id, "%s", "read_olny", 1)
	e.WriteConfig(t, o)
	code, body, err := e.Admin(http.MethodPost, "/-/reload")
	if err != nil || code == http.StatusOK || !strings.Contains(body+e.Log(), `identities[0].attributes.sql_profile "read_olny"`) {
		t.Fatalf("reload = %d %q, %v; want a refusal naming identities[0].attributes.sql_profile\n%s", code, body, err, e.Log())
	}
	if code, _, err := e.Admin(http.MethodGet, "/readyz"); err != nil || code != http.StatusOK {
		t.Errorf("/readyz after a refused reload = %d, %v; want 200", code, err)
	}
}
