package generation

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/internal/metrics"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/broker"
	"github.com/egressd/egressd/rego"
)

// SetGrants swaps in the bundle in force with the grants, for every
// listener, only once commit succeeds; a reload keeps the grants; a
// bundle edited on disk since is not what a grant applies to.
func TestSetGrants(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	bundle := filepath.Join(dir, "bundle")
	if err := rego.Write(bundle, false); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "egressd.yaml")
	if err := os.WriteFile(path, []byte("policy:\n  dir: "+bundle+"\n  eval_timeout: 10s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	first, err := Build(ctx, cfg, path, Serving, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	var l listener
	r := NewRunning(first, Options{
		Path: path, Log: zap.NewNop(), Secrets: broker.NewStore(first.Secrets), Listeners: []Reloader{&l},
		Policy: metrics.NewPolicy(prometheus.NewRegistry()), Reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reloads_total"}, []string{"result"}),
	})
	allows := func() string {
		pd := policy.PreDial{Engine: r.Current().Engine, Floor: r.Current().Floor}
		return pd.DecideConnect(ctx, identity.Anonymous, "granted.test:443").Decision.Rule
	}
	g := policy.Grant{ID: "g1", Identity: "anonymous", Host: "granted.test", Port: 443, Tunnel: true, Expires: time.Now().Add(time.Hour)}

	if err := r.SetGrants(ctx, []policy.Grant{g}, func() error { return errors.New("disk full") }); err == nil || allows() != "" || len(l.engines) != 0 {
		t.Fatalf("SetGrants with a failing commit = %v, rule %q, %d listener reloads; want the error and nothing changed", err, allows(), len(l.engines))
	}
	// A broken bundle on disk is not picked up by a grant.
	if err := os.WriteFile(filepath.Join(bundle, "broken.rego"), []byte("package egress.x\n\nx := {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.SetGrants(ctx, []policy.Grant{g}, func() error { return nil }); err != nil {
		t.Fatalf("SetGrants = %v", err)
	}
	if got := allows(); got != "grant:g1" || len(l.engines) != 1 || l.engines[0] != r.Current().Engine {
		t.Errorf("after SetGrants: rule %q, %d listener reloads; want grant:g1, handed to the listener", got, len(l.engines))
	}
	if err := os.Remove(filepath.Join(bundle, "broken.rego")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reload(ctx); err != nil {
		t.Fatalf("Reload = %v", err)
	}
	if got := allows(); got != "grant:g1" {
		t.Errorf("after a reload: rule %q; want the grant kept (grant:g1)", got)
	}
	if err := r.SetGrants(ctx, nil, func() error { return nil }); err != nil || allows() != "" {
		t.Errorf("SetGrants(none) = %v, rule %q; want the grant gone", err, allows())
	}
}
