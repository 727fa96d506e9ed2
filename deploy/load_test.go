package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// manifests is every object under kubernetes/, by kind and name.
type manifests struct {
	namespaces   map[string]*corev1.Namespace
	netpols      map[string]*networkingv1.NetworkPolicy // key namespace/name
	services     map[string]*corev1.Service
	configMaps   map[string]*corev1.ConfigMap
	secrets      map[string]*corev1.Secret
	statefulSets map[string]*appsv1.StatefulSet
	deployments  map[string]*appsv1.Deployment
	pdbs         map[string]*policyv1.PodDisruptionBudget
	hpas         map[string]*autoscalingv2.HorizontalPodAutoscaler
}

// newObject returns an empty typed object for a manifest's apiVersion and
// kind, and where to file it. A kind the test does not know is an error, so
// every manifest is checked strictly.
func (m *manifests) newObject(tm metav1.TypeMeta) (any, func(key string), error) {
	switch tm.APIVersion + "/" + tm.Kind {
	case "v1/Namespace":
		o := &corev1.Namespace{}
		return o, func(k string) { m.namespaces[k] = o }, nil
	case "networking.k8s.io/v1/NetworkPolicy":
		o := &networkingv1.NetworkPolicy{}
		return o, func(k string) { m.netpols[k] = o }, nil
	case "v1/Service":
		o := &corev1.Service{}
		return o, func(k string) { m.services[k] = o }, nil
	case "v1/ConfigMap":
		o := &corev1.ConfigMap{}
		return o, func(k string) { m.configMaps[k] = o }, nil
	case "v1/Secret":
		o := &corev1.Secret{}
		return o, func(k string) { m.secrets[k] = o }, nil
	case "apps/v1/StatefulSet":
		o := &appsv1.StatefulSet{}
		return o, func(k string) { m.statefulSets[k] = o }, nil
	case "apps/v1/Deployment":
		o := &appsv1.Deployment{}
		return o, func(k string) { m.deployments[k] = o }, nil
	case "policy/v1/PodDisruptionBudget":
		o := &policyv1.PodDisruptionBudget{}
		return o, func(k string) { m.pdbs[k] = o }, nil
	case "autoscaling/v2/HorizontalPodAutoscaler":
		o := &autoscalingv2.HorizontalPodAutoscaler{}
		return o, func(k string) { m.hpas[k] = o }, nil
	}
	return nil, nil, fmt.Errorf("unknown apiVersion/kind %s/%s", tm.APIVersion, tm.Kind)
}

var docSeparator = regexp.MustCompile(`(?m)^---\s*$`)

// loadManifests decodes every document of every kubernetes/*.yaml file
// strictly (unknown or duplicate fields are errors) into its API type.
func loadManifests(t *testing.T) *manifests {
	t.Helper()
	m := &manifests{
		namespaces:   map[string]*corev1.Namespace{},
		netpols:      map[string]*networkingv1.NetworkPolicy{},
		services:     map[string]*corev1.Service{},
		configMaps:   map[string]*corev1.ConfigMap{},
		secrets:      map[string]*corev1.Secret{},
		statefulSets: map[string]*appsv1.StatefulSet{},
		deployments:  map[string]*appsv1.Deployment{},
		pdbs:         map[string]*policyv1.PodDisruptionBudget{},
		hpas:         map[string]*autoscalingv2.HorizontalPodAutoscaler{},
	}
	files, err := filepath.Glob(filepath.Join("kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("glob kubernetes/*.yaml = %v, %v; want manifests", files, err)
	}
	seen := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range docSeparator.Split(string(b), -1) {
			if len(bytes.TrimSpace(stripComments([]byte(doc)))) == 0 {
				continue
			}
			where := fmt.Sprintf("%s document %d", f, i)
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			obj, file, err := m.newObject(tm)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s: strict decode as %s: %v", where, tm.Kind, err)
			}
			meta := obj.(metav1.Object)
			key := meta.GetName()
			if meta.GetNamespace() != "" {
				key = meta.GetNamespace() + "/" + key
			}
			if prev, dup := seen[tm.Kind+" "+key]; dup {
				t.Fatalf("%s: %s %s already defined in %s", where, tm.Kind, key, prev)
			}
			seen[tm.Kind+" "+key] = where
			file(key)
		}
	}
	return m
}

var commentLine = regexp.MustCompile(`(?m)^\s*#.*$`)

func stripComments(b []byte) []byte { return commentLine.ReplaceAll(b, nil) }

// must returns m[key] or fails the test naming what is missing.
func must[T any](t *testing.T, m map[string]*T, key string) *T {
	t.Helper()
	v, ok := m[key]
	if !ok {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		t.Fatalf("manifest %q missing; have %q", key, keys)
	}
	return v
}
