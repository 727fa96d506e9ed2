package deploy

import (
	"os"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestApplyOrder: `kubectl apply -k deploy/kubernetes` on an empty cluster
// creates every Namespace before anything in it, and every ConfigMap and
// Secret before the workload that mounts or reads it (issue 17 item 2:
// `kubectl apply -f deploy/kubernetes/` applied availability.yaml, in
// namespace egressd, before namespaces.yaml).
func TestApplyOrder(t *testing.T) {
	checkApplyOrder(t, loadManifests(t))
}

// checkApplyOrder checks m's objects are applied after their Namespace
// and after the ConfigMaps, Secrets and ServiceAccount their pods use.
func checkApplyOrder(t *testing.T, m *manifests) {
	t.Helper()
	pos := map[object]int{}
	for i, o := range m.order {
		pos[o] = i
	}
	for i, o := range m.order {
		if o.namespace == "" {
			continue
		}
		ns := object{kind: "Namespace", name: o.namespace}
		if j, ok := pos[ns]; !ok || j > i {
			t.Errorf("%s is applied at %d, its Namespace at %d (present %v); want the Namespace first", o, i, j, ok)
		}
	}
	for i, o := range m.order {
		var pod *corev1.PodSpec
		switch w := m.objects[o].(type) {
		case *appsv1.StatefulSet:
			pod = &w.Spec.Template.Spec
		case *appsv1.Deployment:
			pod = &w.Spec.Template.Spec
		default:
			continue
		}
		for _, dep := range podDependencies(o.namespace, pod) {
			if j, ok := pos[dep]; !ok || j > i {
				t.Errorf("%s (at %d) uses %s (at %d, present %v); want it applied first", o, i, dep, j, ok)
			}
		}
	}
}

// podDependencies are the ConfigMaps and Secrets a pod mounts or reads
// environment from, and its ServiceAccount; a pod cannot start before they
// exist.
func podDependencies(ns string, pod *corev1.PodSpec) []object {
	var out []object
	cm := func(name string) { out = append(out, object{kind: "ConfigMap", namespace: ns, name: name}) }
	secret := func(name string) { out = append(out, object{kind: "Secret", namespace: ns, name: name}) }
	if pod.ServiceAccountName != "" {
		out = append(out, object{kind: "ServiceAccount", namespace: ns, name: pod.ServiceAccountName})
	}
	for _, v := range pod.Volumes {
		if v.ConfigMap != nil {
			cm(v.ConfigMap.Name)
		}
		if v.Secret != nil {
			secret(v.Secret.SecretName)
		}
	}
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
				cm(e.ValueFrom.ConfigMapKeyRef.Name)
			}
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				secret(e.ValueFrom.SecretKeyRef.Name)
			}
		}
		for _, e := range c.EnvFrom {
			if e.ConfigMapRef != nil {
				cm(e.ConfigMapRef.Name)
			}
			if e.SecretRef != nil {
				secret(e.SecretRef.Name)
			}
		}
	}
	return out
}

// TestKustomizationImage: egressd's image is set in one place, the
// kustomization's images: (which the README's `kustomize edit set image`
// changes), and reaches the StatefulSet.
func TestKustomizationImage(t *testing.T) {
	var k struct {
		Resources []string `json:"resources"`
		Images    []struct {
			Name    string `json:"name"`
			NewName string `json:"newName"`
			NewTag  string `json:"newTag"`
		} `json:"images"`
	}
	b, err := os.ReadFile("kubernetes/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if len(k.Images) != 1 || k.Images[0].Name != "egressd" || k.Images[0].NewName == "" || k.Images[0].NewTag == "" {
		t.Fatalf("kustomization images = %+v; want one entry for egressd with newName and newTag", k.Images)
	}
	want := k.Images[0].NewName + ":" + k.Images[0].NewTag
	c := egressdContainer(t, must(t, loadManifests(t).statefulSets, egressdNS+"/egressd").Spec.Template.Spec)
	if c.Image != want {
		t.Errorf("built egressd image = %q; want %q from the kustomization's images:", c.Image, want)
	}
	raw, err := os.ReadFile(statefulSetFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "image: egressd\n") {
		t.Errorf("%s does not name the image plainly \"egressd\" for kustomize to set", statefulSetFile)
	}
}
