package generation

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/rego"
)

// TestUnknownRuleIdentities is issue 25 item 5: a rule naming an
// identity the config lacks is warned about when a generation is built
// (serve's start and every reload), once per rule and identity;
// "anonymous" is known exactly when the config declares no identities.
func TestUnknownRuleIdentities(t *testing.T) {
	const data = `{"rules": [
		{"id": "pypi", "hosts": ["pypi.org"], "ports": [443], "identities": ["sandbox-1", "sandbx-2"]},
		{"id": "open", "hosts": ["example.com"], "ports": [443], "identities": ["anonymous"]},
		{"id": "all", "hosts": ["example.org"], "ports": [443]}]}`
	const ids = "identities:\n  - {id: sandbox-1, sources: [10.0.0.7/32]}\n  - {id: sandbox-2, sources: [10.0.0.8/32]}\n"
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"with identities", ids, []string{"open anonymous", "pypi sandbx-2"}},
		{"anonymous only", "", []string{"pypi sandbox-1", "pypi sandbx-2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			bundle := filepath.Join(dir, "bundle")
			if err := rego.Write(bundle, false); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(bundle, "data.json"), []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "egressd.yaml")
			if err := os.WriteFile(path, []byte("policy:\n  dir: "+bundle+"\n  eval_timeout: 10s\n"+tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := config.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			core, logs := observer.New(zap.WarnLevel)
			if _, err := Build(context.Background(), cfg, path, Deciding, zap.New(core)); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range logs.FilterMessageSnippet("identity the config lacks").All() {
				m := e.ContextMap()
				got = append(got, fmt.Sprintf("%s %s", m["rule"], m["identity"]))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("warned of %q; want %q", got, tt.want)
			}
		})
	}
}
