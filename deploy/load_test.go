package deploy

import (
	"fmt"
	"os"
	"sort"
	"testing"

	"github.com/egressd/egressd/cmd/egressd/config"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// manifests is every object kubernetes/'s kustomization builds, by kind and
// name.
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
	accounts     map[string]*corev1.ServiceAccount
	roles        map[string]*rbacv1.Role
	roleBindings map[string]*rbacv1.RoleBinding
	// order is every object in the order kustomize emits, and so
	// kubectl applies, them; objects holds each one's typed value.
	order   []object
	objects map[object]any
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
	case "v1/ServiceAccount":
		o := &corev1.ServiceAccount{}
		return o, func(k string) { m.accounts[k] = o }, nil
	case "rbac.authorization.k8s.io/v1/Role":
		o := &rbacv1.Role{}
		return o, func(k string) { m.roles[k] = o }, nil
	case "rbac.authorization.k8s.io/v1/RoleBinding":
		o := &rbacv1.RoleBinding{}
		return o, func(k string) { m.roleBindings[k] = o }, nil
	}
	return nil, nil, fmt.Errorf("unknown apiVersion/kind %s/%s", tm.APIVersion, tm.Kind)
}

// object names one manifest object in the order kustomize emits it.
type object struct {
	kind, namespace, name string
}

func (o object) String() string {
	if o.namespace == "" {
		return o.kind + " " + o.name
	}
	return o.kind + " " + o.namespace + "/" + o.name
}

// kustomizeBuild renders dir as `kustomize build` (and `kubectl apply -k`)
// would, and returns its objects as YAML documents in apply order.
func kustomizeBuild(t *testing.T, dir string) [][]byte {
	t.Helper()
	opts := krusty.MakeDefaultOptions()
	// The order is the kustomization's sortOptions, as for kubectl -k.
	opts.Reorder = krusty.ReorderOptionUnspecified
	k := krusty.MakeKustomizer(opts)
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var docs [][]byte
	for _, r := range rm.Resources() {
		b, err := r.AsYAML()
		if err != nil {
			t.Fatalf("kustomize build %s: %s: %v", dir, r.CurId(), err)
		}
		docs = append(docs, b)
	}
	return docs
}

// loadManifests builds kubernetes/ with kustomize, as a user applies it,
// and decodes every object strictly (unknown or duplicate fields are
// errors) into its API type; loadManifestsDir builds another kustomization
// (an overlay) the same way.
func loadManifests(t *testing.T) *manifests {
	t.Helper()
	return loadManifestsDir(t, "kubernetes")
}

func loadManifestsDir(t *testing.T, dir string) *manifests {
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
		accounts:     map[string]*corev1.ServiceAccount{},
		roles:        map[string]*rbacv1.Role{},
		roleBindings: map[string]*rbacv1.RoleBinding{},
		objects:      map[object]any{},
	}
	seen := map[string]bool{}
	for i, doc := range kustomizeBuild(t, dir) {
		where := fmt.Sprintf("kustomize build %s, object %d", dir, i)
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		obj, file, err := m.newObject(tm)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Fatalf("%s: strict decode as %s: %v", where, tm.Kind, err)
		}
		meta := obj.(metav1.Object)
		key := meta.GetName()
		if meta.GetNamespace() != "" {
			key = meta.GetNamespace() + "/" + key
		}
		if seen[tm.Kind+" "+key] {
			t.Fatalf("%s: %s %s defined twice", where, tm.Kind, key)
		}
		seen[tm.Kind+" "+key] = true
		file(key)
		o := object{kind: tm.Kind, namespace: meta.GetNamespace(), name: meta.GetName()}
		m.order = append(m.order, o)
		m.objects[o] = obj
	}
	return m
}

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

// parseConfigFile parses the egressd config at path with egressd's own
// strict loader.
func parseConfigFile(t *testing.T, path string) *config.Config {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(b)
	if err != nil {
		t.Fatalf("config.Parse(%s) = %v", path, err)
	}
	return cfg
}
