package deploy

import (
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gopkg.in/yaml.v3"
)

var update = flag.Bool("update", false, "rewrite kubernetes/policy-configmap.yaml from rego/")

const policyConfigMapFile = "kubernetes/policy-configmap.yaml"

// bundleFiles returns rego/'s bundle files (Rego modules and data files,
// not the Go embedding) keyed by their slash path inside the bundle.
func bundleFiles(t *testing.T) map[string]string {
	t.Helper()
	files := map[string]string{}
	root := filepath.Join("..", "rego")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name := d.Name()
		if !strings.HasSuffix(name, ".rego") && name != "data.json" && name != "data.yaml" {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatalf("read bundle: %v", err)
	}
	return files
}

// configMapKey maps a bundle path to a ConfigMap key, which may not contain
// '/': "dns/data.json" becomes "dns.data.json".
func configMapKey(path string) string { return strings.ReplaceAll(path, "/", ".") }

// TestPolicyConfigMap keeps the Kubernetes policy ConfigMap byte-equal to
// rego/ (regenerate with `go test ./deploy -run TestPolicyConfigMap
// -update`) and the StatefulSet's volume items mapping every key back to
// its bundle path.
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
			t.Errorf("%s key %q differs from rego/; run go test ./deploy -run TestPolicyConfigMap -update", policyConfigMapFile, k)
		}
	}
	for k := range got.Data {
		if _, ok := want.Data[k]; !ok {
			t.Errorf("%s key %q is not in rego/; run go test ./deploy -run TestPolicyConfigMap -update", policyConfigMapFile, k)
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
	b.WriteString("# Generated from rego/ by `go test ./deploy -run TestPolicyConfigMap -update`; do not edit.\n")
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
