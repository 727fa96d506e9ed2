package deploy

import (
	"net/url"
	"os"
	"path"
	"reflect"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

const bundleOverlay = "kubernetes-bundle-service"

// TestBundleServiceOverlay (issue 27 item 3): the overlay that serves
// egressd's policy from a bundle service builds, applies in order, and
// agrees with itself: the config's bundle_url names the service's DNS
// name, port and the path nginx serves; the CA and key files are where
// the trust ConfigMap is mounted, under the names bundle.sh gives them;
// every other config section is the example's own.
func TestBundleServiceOverlay(t *testing.T) {
	m := loadManifestsAt(t, bundleOverlay)
	checkApplyOrder(t, m)
	cfg := m.egressdConfig(t)

	base := loadManifests(t).egressdConfig(t)
	if base.Policy.Dir == "" || cfg.Policy.Dir != "" {
		t.Errorf("policy.dir = %q in the overlay, %q in the example; want the example's replaced by bundle_url", cfg.Policy.Dir, base.Policy.Dir)
	}
	base.Policy = cfg.Policy
	if !reflect.DeepEqual(base, cfg) {
		t.Errorf("%s/config.yaml differs from the example's egressd-config beyond policy:\n got %+v\nwant %+v", bundleOverlay, cfg, base)
	}

	svc := must(t, m.services, egressdNS+"/egressd-bundles")
	u, err := url.Parse(cfg.Policy.BundleURL)
	if err != nil {
		t.Fatal(err)
	}
	if want := svc.Name + "." + svc.Namespace + ".svc.cluster.local"; u.Scheme != "https" || u.Hostname() != want {
		t.Errorf("policy.bundle_url = %q; want https://%s/…", cfg.Policy.BundleURL, want)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 443 || u.Port() != "" {
		t.Errorf("service ports %+v, bundle_url port %q; want 443, the URL's default", svc.Spec.Ports, u.Port())
	}
	conf := must(t, m.configMaps, egressdNS+"/egressd-bundles-nginx").Data["default.conf"]
	if !strings.Contains(conf, "location = "+u.Path+" {") {
		t.Errorf("nginx serves no location %q (bundle_url's path):\n%s", u.Path, conf)
	}

	dep := must(t, m.deployments, egressdNS+"/egressd-bundles")
	pod := dep.Spec.Template.Spec
	checkRestrictedPod(t, "egressd-bundles", pod)
	for k, v := range svc.Spec.Selector {
		if pod.Containers[0].Name == "" || dep.Spec.Template.Labels[k] != v {
			t.Errorf("service selector %s=%s does not select the bundle server's pods (%v)", k, v, dep.Spec.Template.Labels)
		}
	}
	var https corev1.ContainerPort
	for _, p := range pod.Containers[0].Ports {
		if p.Name == svc.Spec.Ports[0].TargetPort.StrVal {
			https = p
		}
	}
	if https.ContainerPort == 0 || !regexp.MustCompile(`listen `+itoa(https.ContainerPort)+` ssl;`).MatchString(conf) {
		t.Errorf("service targets %q, container port %d; want the port nginx listens on with TLS", svc.Spec.Ports[0].TargetPort.StrVal, https.ContainerPort)
	}
	np := must(t, m.netpols, egressdNS+"/egressd-bundles-from-egressd")
	if np.Spec.PodSelector.MatchLabels[appLabel] != "egressd-bundles" || len(np.Spec.Ingress) != 1 ||
		np.Spec.Ingress[0].From[0].PodSelector.MatchLabels[appLabel] != "egressd" || np.Spec.Ingress[0].Ports[0].Port.IntVal != https.ContainerPort {
		t.Errorf("NetworkPolicy egressd-bundles-from-egressd = %+v; want ingress to the bundle server from egressd's pods on %d only", np.Spec, https.ContainerPort)
	}

	// egressd's trust files: mounted from the ConfigMap bundle.sh fills,
	// under the names it writes.
	sts := must(t, m.statefulSets, egressdNS+"/egressd").Spec.Template.Spec
	mount := ""
	for _, vm := range egressdContainer(t, sts).VolumeMounts {
		if vm.Name == "bundle-trust" {
			mount = vm.MountPath
		}
	}
	var trust *corev1.ConfigMapVolumeSource
	for _, v := range sts.Volumes {
		if v.Name == "bundle-trust" {
			trust = v.ConfigMap
		}
	}
	baseMounts := egressdContainer(t, must(t, loadManifests(t).statefulSets, egressdNS+"/egressd").Spec.Template.Spec).VolumeMounts
	if got := egressdContainer(t, sts).VolumeMounts; len(got) != len(baseMounts)+1 {
		t.Errorf("egressd mounts %d volumes in the overlay; want the example's %d and bundle-trust", len(got), len(baseMounts))
	}
	if mount == "" || trust == nil || trust.Name != "egressd-bundle-trust" {
		t.Fatalf("egressd mounts bundle-trust at %q from %+v; want the ConfigMap egressd-bundle-trust", mount, trust)
	}
	must(t, m.configMaps, egressdNS+"/egressd-bundle-trust")
	script, err := os.ReadFile(bundleOverlay + "/bundle.sh")
	if err != nil {
		t.Fatal(err)
	}
	for key, file := range map[string]string{"policy.bundle_ca_file": cfg.Policy.BundleCAFile,
		"policy.bundle_verification.public_key_file": cfg.Policy.BundleVerification.PublicKeyFile} {
		if path.Dir(file) != mount || !strings.Contains(string(script), "--from-file="+path.Base(file)+"=") {
			t.Errorf("%s = %q; want a file under %s that bundle.sh puts in egressd-bundle-trust", key, file, mount)
		}
	}
	if !strings.Contains(string(script), "create configmap egressd-bundle ") || !strings.Contains(string(script), "--from-file="+path.Base(u.Path)+"=") {
		t.Errorf("bundle.sh does not put %s in the ConfigMap egressd-bundle nginx serves", path.Base(u.Path))
	}
}
