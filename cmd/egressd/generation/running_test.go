package generation

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/internal/metrics"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/broker"
	"github.com/egressd/egressd/proxy/ca"
	"github.com/egressd/egressd/rego"
)

// listener records what each reload hands a listener.
type listener struct {
	engines []policy.Decider
	ids     []*identity.Store
}

func (l *listener) Reload(d policy.Decider, ids *identity.Store) {
	l.engines = append(l.engines, d)
	l.ids = append(l.ids, ids)
}

// TestReloadIsAtomic: a reload that builds swaps in the whole new
// generation (bundle, identities, internal:, secrets) for every listener;
// one that fails at any step (the YAML, a check of the identities against
// the bundle, the last step: a secret's value) is refused, and the
// generation in force stays, untouched and still handed to no one anew.
func TestReloadIsAtomic(t *testing.T) {
	const unset = "EGRESSD_TEST_RELOAD_UNSET_SECRET"
	if err := os.Unsetenv(unset); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	bundle := filepath.Join(dir, "bundle")
	if err := rego.Write(bundle, false); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "egressd.yaml")
	write := func(yaml string) {
		t.Helper()
		if err := os.WriteFile(path, []byte("policy:\n  dir: "+bundle+"\n  eval_timeout: 10s\n"+yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("")
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	first, err := Build(ctx, cfg, path, Serving, zap.NewNop())
	if err != nil {
		t.Fatalf("Build = %v", err)
	}
	var l listener
	flushes := 0
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reloads_total"}, []string{"result"})
	auditDir := filepath.Join(dir, "audit")
	r := NewRunning(first, Options{
		Path: path, Log: zap.NewNop(), Flush: func() { flushes++ }, Secrets: broker.NewStore(first.Secrets),
		Listeners: []Reloader{&l}, Policy: metrics.NewPolicy(prometheus.NewRegistry()), Reloads: reloads,
		AuditDir: auditDir,
	})
	allows := func(g *Generation, target string) bool {
		pd := policy.PreDial{Engine: g.Engine, Floor: g.Floor}
		return pd.DecideConnect(ctx, identity.Anonymous, target).Decision.Allow
	}
	if allows(first, "example.org:443") {
		t.Fatal("the embedded bundle allows example.org:443; the test needs a host it denies")
	}

	// A new rule, an identity and an internal: entry, in one reload.
	data, err := os.ReadFile(filepath.Join(bundle, "data.json"))
	if err != nil {
		t.Fatal(err)
	}
	data = []byte(strings.Replace(string(data), `"rules": [`, `"rules": [{"id": "example", "hosts": ["example.org"], "ports": [443]},`, 1))
	if err := os.WriteFile(filepath.Join(bundle, "data.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	const good = "identities:\n  - id: sandbox-1\n    sources: [192.0.2.0/24]\ninternal:\n  - {cidr: 10.20.0.0/16, ports: [5432], action: allow}\n"
	write(good)
	pending, err := r.Reload(ctx)
	if err != nil || len(pending) != 0 {
		t.Fatalf("Reload = %v, %v; want it applied with nothing pending", pending, err)
	}
	next := r.Current()
	if next == first || next.Identities.Len() != 1 || next.Engine.Digest() == first.Engine.Digest() {
		t.Fatalf("Current() after a reload = %+v; want a new generation with the new bundle and 1 identity", next)
	}
	// The reloaded bundle is archived before it decides: its records can
	// be re-decided under it (policy replay).
	if _, err := policy.NewArchived(ctx, cfg.Policy, policy.ArchiveDir(auditDir), next.Engine.Digest(), zap.NewNop()); err != nil {
		t.Errorf("reloaded bundle not archived: %v", err)
	}
	if !allows(next, "example.org:443") {
		t.Error("the reloaded generation denies example.org:443; want the new rule to allow it")
	}
	if len(l.engines) != 1 || l.engines[0] != next.Engine || l.ids[0] != next.Identities {
		t.Errorf("listener handed %d generations; want exactly the new one", len(l.engines))
	}
	// The resolver and dialers hold the first floor: it takes the entry.
	if err := first.Floor.Check(netip.MustParseAddr("10.20.0.5"), 5432); err != nil || flushes != 1 {
		t.Errorf("running floor after the reload: Check(10.20.0.5:5432) = %v, %d flushes; want allowed and 1 flush", err, flushes)
	}

	for _, tt := range []struct{ name, yaml, want string }{
		{"bad YAML", "proxy: [", "egressd.yaml"},
		{"identity the bundle cannot honour", "identities:\n  - id: sandbox-2\n    sources: [192.0.2.0/24]\n    attributes: {sql_profile: no_such_profile}\n", "identities[0]."},
		{"secret without a value", good + "secrets:\n  - name: gh\n    env: " + unset + "\n", unset},
	} {
		t.Run(tt.name, func(t *testing.T) {
			write(tt.yaml)
			_, err := r.Reload(ctx)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Reload = %v; want a refusal naming %q", err, tt.want)
			}
			if r.Current() != next || len(l.engines) != 1 {
				t.Errorf("after a refused reload Current() changed or a listener was handed %d generations; want the one in force kept", len(l.engines))
			}
		})
	}
	count := func(result string) float64 {
		var m dto.Metric
		if err := reloads.WithLabelValues(result).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	if des, err := os.ReadDir(policy.ArchiveDir(auditDir)); err != nil || len(des) != 2 {
		t.Errorf("bundle archive = %v, %v; want the two bundles put in force (start, reload), not the refused ones", des, err)
	}
	if ok, failed := count("ok"), count("failed"); ok != 1 || failed != 3 {
		t.Errorf("reloads counted ok %v, failed %v; want 1 and 3", ok, failed)
	}
}

// TestReloadNamesInspectAsNeedingRestart: the CA section is read at start
// only, so a reload that changes it says so rather than seeming applied.
func TestReloadNamesInspectAsNeedingRestart(t *testing.T) {
	running := config.Default()
	loaded := config.Default()
	loaded.Inspect.LeafTTL = 2 * time.Hour
	loaded.Inspect.CADir = "/elsewhere"
	if got := restartNeeded(running, loaded, nil); !slices.Equal(got, []string{"inspect"}) {
		t.Errorf("restartNeeded(inspect changed) = %v; want [inspect]", got)
	}
	withRoot := config.Default()
	withRoot.Identities = identity.Config{{ID: "a", Sources: []string{"10.0.0.0/8"}, CACert: "/c.pem", CAKey: "/k.pem"}}
	if got := restartNeeded(running, withRoot, nil); !slices.Equal(got, []string{"identities ca_cert/ca_key"}) {
		t.Errorf("restartNeeded(configured root added) = %v; want [identities ca_cert/ca_key]", got)
	}
	opened := map[string]ca.Files{"a": {Cert: "/c.pem", Key: "/k.pem"}}
	if got := restartNeeded(withRoot, withRoot, opened); len(got) != 0 {
		t.Errorf("restartNeeded(same configured root) = %v; want none", got)
	}
}

// TestDecidingReadsNoSecretValue: a generation built for `check` runs every
// step but the secrets' values, so a check answers where no secret can be
// read, and a config whose secret cannot be read still starts no listener.
func TestDecidingReadsNoSecretValue(t *testing.T) {
	const unset = "EGRESSD_TEST_DECIDING_UNSET_SECRET"
	if err := os.Unsetenv(unset); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bundle := filepath.Join(dir, "bundle")
	if err := rego.Write(bundle, false); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "egressd.yaml")
	yaml := "policy:\n  dir: " + bundle + "\nsecrets:\n  - name: gh\n    env: " + unset + "\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g, err := Build(context.Background(), cfg, path, Deciding, zap.NewNop())
	if err != nil || g.Secrets != nil {
		t.Fatalf("Build(Deciding) = %v, secrets %v; want a generation without secret values", err, g)
	}
	if _, err := Build(context.Background(), cfg, path, Serving, zap.NewNop()); err == nil || !strings.Contains(err.Error(), unset) {
		t.Errorf("Build(Serving) = %v; want the unset variable %s named", err, unset)
	}
}
