package deploy

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/egressd/egressd/policy/sqlparse"
)

// TestCADirNeverShipped (issue 25 item 7): inspect.ca_dir's default,
// egressd-ca/ beside the audit directory, holds private keys. It is never
// committed and never sent to a docker build as context.
func TestCADirNeverShipped(t *testing.T) {
	for _, tt := range []struct {
		file string
		want []string // any of these lines ignores egressd-ca/ wherever it sits
	}{
		{"../.gitignore", []string{"egressd-ca/", "egressd-ca", "**/egressd-ca/", "**/egressd-ca"}},
		{"../.dockerignore", []string{"**/egressd-ca/", "**/egressd-ca"}},
	} {
		b, err := os.ReadFile(tt.file)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		if !slices.ContainsFunc(lines, func(l string) bool { return slices.Contains(tt.want, strings.TrimSpace(l)) }) {
			t.Errorf("%s does not ignore egressd-ca/ (a line of %q); a CA private key could be committed or sent as build context", tt.file, tt.want)
		}
	}
}

// TestReloadEndpointNamed: the admin listener's reload endpoint is
// /-/reload; a bare /reload in the docs sends an operator to a 404.
func TestReloadEndpointNamed(t *testing.T) {
	bare := regexp.MustCompile(`(^|[^-\w])/reload\b`)
	for _, f := range []string{"egressd.yaml", "../README.md", "kubernetes/statefulset.yaml", "compose/egressd.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if bare.MatchString(line) {
				t.Errorf("%s:%d names /reload; the endpoint is /-/reload: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}

// TestEgressdLifecycleKubernetes: the HPA alone sets the replica count,
// the kubelet waits out the drain, and the image is a pinned tag.
func TestEgressdLifecycleKubernetes(t *testing.T) {
	m := loadManifests(t)
	cfg := m.egressdConfig(t)
	pod := must(t, m.statefulSets, egressdNS+"/egressd").Spec.Template.Spec
	grace := pod.TerminationGracePeriodSeconds
	if grace == nil || time.Duration(*grace)*time.Second <= cfg.Proxy.DrainTimeout {
		t.Errorf("terminationGracePeriodSeconds = %v; want longer than proxy.drain_timeout %s, or the drain is killed", grace, cfg.Proxy.DrainTimeout)
	}

	b, err := os.ReadFile("kubernetes/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Images []struct {
			Name    string `yaml:"name"`
			NewName string `yaml:"newName"`
			NewTag  string `yaml:"newTag"`
			Digest  string `yaml:"digest"`
		} `yaml:"images"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	semver := regexp.MustCompile(`^v\d+\.\d+\.\d+$`)
	var found bool
	for _, im := range k.Images {
		if im.Name != "egressd" {
			continue
		}
		found = true
		if !semver.MatchString(im.NewTag) && !strings.HasPrefix(im.Digest, "sha256:") {
			t.Errorf("kustomization image egressd: newTag %q, digest %q; want a release tag (vX.Y.Z) or a digest, never latest", im.NewTag, im.Digest)
		}
	}
	if !found {
		t.Error("kustomization.yaml sets no image for egressd")
	}
}

// Measured bounds behind the egressd container's memory limit (see the
// comment on its resources in statefulset.yaml).
const (
	// egressdOwnMemory is what egressd itself is given: 5,000 idle
	// tunnels peaked at 145 MiB (BENCHMARKS.md).
	egressdOwnMemory = 512 << 20
	// workerPeakMemory is the peak resident memory of one parser worker
	// on the worst text of at most workerPeakQueryBytes measured (VmHWM
	// of Normalize of a 1 MiB list of statements: 1,034,404 kB), rounded
	// up.
	workerPeakMemory     = 1 << 30
	workerPeakQueryBytes = 1 << 20
)

// TestEgressdMemoryCoversParserWorkers (issue 25 item 7): the SQL parser
// workers are processes in egressd's container, so its memory limit
// covers egressd and every worker at its measured peak; a limit below
// that lets the OOM killer take egressd itself.
func TestEgressdMemoryCoversParserWorkers(t *testing.T) {
	m := loadManifests(t)
	cfg := m.egressdConfig(t)
	if cfg.Postgres.MaxQueryBytes > workerPeakQueryBytes {
		t.Errorf("postgres.max_query_bytes = %d; the worker peak was measured for texts of at most %d: measure again and raise the limit",
			cfg.Postgres.MaxQueryBytes, workerPeakQueryBytes)
	}
	c := egressdContainer(t, must(t, m.statefulSets, egressdNS+"/egressd").Spec.Template.Spec)
	limit := c.Resources.Limits.Memory()
	want := resource.NewQuantity(egressdOwnMemory+int64(sqlparse.MaxWorkers)*workerPeakMemory, resource.BinarySI)
	if limit.IsZero() || limit.Cmp(*want) < 0 {
		t.Errorf("egressd memory limit = %s; want at least %s (egressd %d MiB + %d parser workers x %d MiB)",
			limit, want, egressdOwnMemory>>20, sqlparse.MaxWorkers, workerPeakMemory>>20)
	}
}

// TestComposeLifecycle (issue 25 item 7): the sandbox starts once
// egressd is healthy, is held to memory and process limits, and egressd
// gets longer than its drain to stop.
func TestComposeLifecycle(t *testing.T) {
	c := loadCompose(t)
	e, sb := c.Services["egressd"], c.Services["sandbox"]
	if e.Healthcheck == nil || !slices.Equal(e.Healthcheck.Test[:min(3, len(e.Healthcheck.Test))], []string{"CMD", "/usr/local/bin/egressd", "health"}) {
		t.Errorf("egressd healthcheck = %+v; want CMD egressd health", e.Healthcheck)
	}
	if dep, ok := sb.DependsOn["egressd"]; !ok || dep.Condition != "service_healthy" {
		t.Errorf("sandbox depends_on = %+v; want egressd with condition service_healthy", sb.DependsOn)
	}
	if sb.MemLimit == "" || sb.PidsLimit <= 0 {
		t.Errorf("sandbox mem_limit %q, pids_limit %d; want both set", sb.MemLimit, sb.PidsLimit)
	}
	cfg := parseConfigFile(t, "compose/egressd.yaml")
	grace, err := time.ParseDuration(e.StopGracePeriod)
	if err != nil || grace <= cfg.Proxy.DrainTimeout {
		t.Errorf("egressd stop_grace_period = %q; want longer than proxy.drain_timeout %s (Docker's default is 10s)", e.StopGracePeriod, cfg.Proxy.DrainTimeout)
	}
}

// TestReadmeNetworkPolicyNeedsCNI: the isolation the manifests promise
// holds only where the CNI enforces NetworkPolicy, and README says so.
func TestReadmeNetworkPolicyNeedsCNI(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, k8s, _ := strings.Cut(string(b), "\n### Kubernetes\n")
	k8s, _, _ = strings.Cut(k8s, "\n### ")
	if !regexp.MustCompile(`NetworkPolicy is enforced only by a CNI`).MatchString(strings.Join(strings.Fields(k8s), " ")) {
		t.Error("README's Kubernetes section does not say NetworkPolicy needs a CNI that enforces it")
	}
}

// TestSandboxMemoryLimit: every container of the Kubernetes example
// sandbox has a memory limit (its processes are bounded by the kubelet's
// podPidsLimit; a pod has no field for it).
func TestSandboxMemoryLimit(t *testing.T) {
	m := loadManifests(t)
	for key, d := range m.sandboxes() {
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s container %s has no memory limit", key, c.Name)
			}
		}
	}
}
