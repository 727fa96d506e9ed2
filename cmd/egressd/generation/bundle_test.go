package generation

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/internal/metrics"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/broker"
)

// fetched is a one-module bundle from a bundle service with revision rev;
// module replaces its module when not "".
func fetched(t *testing.T, rev, module string) *policy.Fetched {
	t.Helper()
	if module == "" {
		module = "package egress.connect\n\ndecision := {\"allow\": false, \"reason\": \"no_matching_rule\", \"rule\": \"" + rev + "\"}\n"
	}
	f, err := policy.NewFetched("https://bundles.test/b.tar.gz", rev, map[string][]byte{"/connect.rego": []byte(module)})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestSetBundle: a bundle from the service is swapped in whole for every
// listener, with its revision in the digest; one that fails to compile is
// refused and the one in force stays; a reload keeps the fetched bundle,
// and a change to where the bundle comes from waits for a restart.
func TestSetBundle(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "egressd.yaml")
	write := func(url string) {
		t.Helper()
		y := "policy:\n  bundle_url: " + url + "\n  bundle_verification:\n    public_key_file: " + filepath.Join(dir, "key.pem") + "\n"
		if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("https://bundles.test/b.tar.gz")
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Policy.Fetched = fetched(t, "r1", "")
	first, err := Build(ctx, cfg, path, Serving, zap.NewNop())
	if err != nil {
		t.Fatalf("Build = %v", err)
	}
	var l listener
	r := NewRunning(first, Options{
		Path: path, Log: zap.NewNop(), Secrets: broker.NewStore(first.Secrets), Listeners: []Reloader{&l},
		Policy:  metrics.NewPolicy(prometheus.NewRegistry()),
		Reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reloads_total"}, []string{"result"}),
	})
	revision := func() string {
		_, rev := policy.SplitDigest(r.Current().Engine.Digest())
		return rev
	}
	if err := r.SetBundle(ctx, fetched(t, "r2", "")); err != nil {
		t.Fatalf("SetBundle(r2) = %v", err)
	}
	if revision() != "r2" || len(l.engines) != 1 || l.engines[0].Digest() != r.Current().Engine.Digest() {
		t.Fatalf("after SetBundle(r2): revision %q, listener got %d engines; want r2 handed to it", revision(), len(l.engines))
	}
	err = r.SetBundle(ctx, fetched(t, "r3", "package egress.connect\n\ndecision := {,}\n"))
	if err == nil || !strings.Contains(err.Error(), "connect.rego:3") {
		t.Errorf("SetBundle(broken) = %v; want the parse error at connect.rego:3", err)
	}
	if revision() != "r2" || len(l.engines) != 1 {
		t.Errorf("after a refused bundle: revision %q, %d engines handed; want r2 still, none handed", revision(), len(l.engines))
	}
	if _, err := r.Reload(ctx); err != nil || revision() != "r2" {
		t.Errorf("Reload() = %v, revision %q; want the fetched r2 kept", err, revision())
	}
	write("https://elsewhere.test/b.tar.gz")
	pending, err := r.Reload(ctx)
	if err != nil || !slices.Contains(pending, "policy dir/bundle_*") || revision() != "r2" {
		t.Errorf("Reload() with a new bundle_url = %v, %v, revision %q; want it pending a restart, r2 kept", pending, err, revision())
	}
	if got := r.Current().Config.Policy.BundleURL; got != "https://bundles.test/b.tar.gz" {
		t.Errorf("bundle_url in force = %q; want the one started with", got)
	}
}
