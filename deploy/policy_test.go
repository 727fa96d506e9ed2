package deploy

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gopkg.in/yaml.v3"

	"github.com/egressd/egressd/policy"
)

var update = flag.Bool("update", false, "rewrite kubernetes/policy-configmap.yaml from `egressd policy init` output")

const policyConfigMapFile = "kubernetes/policy-configmap.yaml"

// bundleFiles returns the bundle `egressd policy init` writes (Rego
// modules, their tests and data files, keyed by slash path inside the
// bundle): what an operator starts from, so the mounted bundle holds no
// test of the default rules (default_test.rego) that editing data.json
// would fail.
func bundleFiles(t *testing.T) map[string]string {
	t.Helper()
	files := readTree(t, policyInit(t))
	maps.DeleteFunc(files, func(rel, _ string) bool {
		name := path.Base(rel)
		return !strings.HasSuffix(name, ".rego") && name != "data.json" && name != "data.yaml"
	})
	return files
}

// configMapKey maps a bundle path to a ConfigMap key, which may not contain
// '/': "dns/data.json" becomes "dns.data.json".
func configMapKey(path string) string { return strings.ReplaceAll(path, "/", ".") }

// TestPolicyConfigMap keeps the Kubernetes policy ConfigMap byte-equal to
// what `egressd policy init` writes from rego/ (regenerate with `go test
// ./deploy -run TestPolicyConfigMap -update`) and the StatefulSet's volume
// items mapping every key back to its bundle path. Before issue 17 it
// was rego/ itself, default_test.rego included, so a pod whose operator
// edited data.json refused the bundle.
func TestPolicyConfigMap(t *testing.T) {
	files := bundleFiles(t)
	if len(files) == 0 {
		t.Fatal("rego/ has no bundle files")
	}
	want := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "egressd-policy", Namespace: egressdNS},
		Data:       map[string]string{},
	}
	var items []corev1.KeyToPath
	for path, body := range files {
		want.Data[configMapKey(path)] = body
		items = append(items, corev1.KeyToPath{Key: configMapKey(path), Path: path})
	}
	cmp := func(a, b corev1.KeyToPath) int { return strings.Compare(a.Key, b.Key) }
	slices.SortFunc(items, cmp)
	if *update {
		writePolicyConfigMap(t, want.Data)
		writeVolumeItems(t, items)
	}

	m := loadManifests(t)
	got := must(t, m.configMaps, egressdNS+"/egressd-policy")
	for k, v := range want.Data {
		if got.Data[k] != v {
			t.Errorf("%s key %q differs from egressd policy init output; run go test ./deploy -run TestPolicyConfigMap -update", policyConfigMapFile, k)
		}
	}
	for k := range got.Data {
		if _, ok := want.Data[k]; !ok {
			t.Errorf("%s key %q is not in egressd policy init output; run go test ./deploy -run TestPolicyConfigMap -update", policyConfigMapFile, k)
		}
	}

	sts := must(t, m.statefulSets, egressdNS+"/egressd")
	var vol *corev1.ConfigMapVolumeSource
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == "policy" {
			vol = v.ConfigMap
		}
	}
	if vol == nil || vol.Name != "egressd-policy" {
		t.Fatalf("statefulset volume policy = %+v; want configMap egressd-policy", vol)
	}
	gotItems := slices.Clone(vol.Items)
	slices.SortFunc(gotItems, cmp)
	if !slices.Equal(gotItems, items) {
		t.Errorf("statefulset policy volume items = %+v; want %+v; run go test ./deploy -run TestPolicyConfigMap -update", gotItems, items)
	}
}

// writePolicyConfigMap writes the ConfigMap with every module as a literal
// block, so a diff of the generated file reads like a diff of rego/.
func writePolicyConfigMap(t *testing.T, data map[string]string) {
	t.Helper()
	str := func(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: v} }
	mapping := func(kv ...*yaml.Node) *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode, Content: kv} }
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	body := mapping()
	for _, k := range keys {
		v := str(data[k])
		v.Style = yaml.LiteralStyle
		body.Content = append(body.Content, str(k), v)
	}
	doc := mapping(
		str("apiVersion"), str("v1"),
		str("kind"), str("ConfigMap"),
		str("metadata"), mapping(str("name"), str("egressd-policy"), str("namespace"), str(egressdNS)),
		str("data"), body,
	)
	var b strings.Builder
	b.WriteString("# Generated from `egressd policy init` output (rego/ without default_test.rego)\n# by `go test ./deploy -run TestPolicyConfigMap -update`, which overwrites\n# edits. Your own rules go in data.json below: the bundle's tests do not\n# depend on it (README \"Kubernetes\").\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(policyConfigMapFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

const (
	statefulSetFile = "kubernetes/statefulset.yaml"
	itemsBegin      = "# BEGIN generated from rego/"
	itemsEnd        = "# END generated"
)

// writeVolumeItems replaces the lines between the generated-items markers
// of the StatefulSet's policy volume with one item per bundle file.
func writeVolumeItems(t *testing.T, items []corev1.KeyToPath) {
	t.Helper()
	b, err := os.ReadFile(statefulSetFile)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i, j := strings.Index(s, itemsBegin), strings.Index(s, itemsEnd)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the %q … %q markers", statefulSetFile, itemsBegin, itemsEnd)
	}
	lineStart := strings.LastIndex(s[:j], "\n") + 1
	indent := s[lineStart:j]
	var gen strings.Builder
	for _, it := range items {
		fmt.Fprintf(&gen, "%s- {key: %s, path: %s}\n", indent, it.Key, it.Path)
	}
	afterBegin := strings.Index(s[i:], "\n") + i + 1
	s = s[:afterBegin] + gen.String() + s[lineStart:]
	if err := os.WriteFile(statefulSetFile, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPolicyConfigMapBundlePasses: the bundle as the pod mounts it (the
// ConfigMap's keys at the StatefulSet's item paths) passes its own Rego
// tests, as shipped and with an operator's rule added to data.json, so
// neither start-up nor a reload refuses it.
func TestPolicyConfigMapBundlePasses(t *testing.T) {
	m := loadManifests(t)
	const userRule = `{"id": "models", "hosts": ["api.models.example.com"], "ports": [443]}`
	tests := []struct {
		name string
		edit func(data string) string
	}{
		{"as shipped", func(d string) string { return d }},
		{"operator rule added", func(d string) string {
			return strings.Replace(d, `"rules": [`, `"rules": [`+"\n    "+userRule+",", 1)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := m.mountPolicy(t, tt.edit)
			if n, err := policy.Test(context.Background(), os.DirFS(dir)); err != nil || n == 0 {
				t.Errorf("policy.Test(mounted bundle) = %d, %v; want its tests to pass", n, err)
			}
		})
	}
}

// mountPolicy writes the egressd-policy ConfigMap's keys at the
// StatefulSet's item paths, as the pod mounts them, with edit applied to
// data.json, and returns the directory.
func (m *manifests) mountPolicy(t *testing.T, edit func(data string) string) string {
	t.Helper()
	cm := must(t, m.configMaps, egressdNS+"/egressd-policy")
	var items []corev1.KeyToPath
	for _, v := range must(t, m.statefulSets, egressdNS+"/egressd").Spec.Template.Spec.Volumes {
		if v.Name == "policy" && v.ConfigMap != nil {
			items = v.ConfigMap.Items
		}
	}
	dir := t.TempDir()
	for _, it := range items {
		body := cm.Data[it.Key]
		if it.Path == "data.json" {
			body = edit(body)
		}
		p := filepath.Join(dir, filepath.FromSlash(it.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
