package deploy

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// envValue is the literal value of the container's variable name (exact
// case), or "".
func envValue(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// TestKubernetesClientsIgnoringProxy (issue 26): the config's SOCKS5 and
// transparent listeners are the pod's socks and transparent ports, DNS
// steering answers with the Service's address, and the Service sends 80
// and 443 to the transparent listener and 1080 to SOCKS5.
func TestKubernetesClientsIgnoringProxy(t *testing.T) {
	m := loadManifests(t)
	cfg := m.egressdConfig(t)
	ports := map[string]int32{}
	for _, p := range egressdContainer(t, must(t, m.statefulSets, egressdNS+"/egressd").Spec.Template.Spec).Ports {
		ports[p.Name] = p.ContainerPort
	}
	if port(cfg.Proxy.SOCKSListen) != itoa(ports["socks"]) || port(cfg.Proxy.TransparentListen) != itoa(ports["transparent"]) {
		t.Errorf("proxy.socks_listen %q, transparent_listen %q; want the container ports socks %d, transparent %d",
			cfg.Proxy.SOCKSListen, cfg.Proxy.TransparentListen, ports["socks"], ports["transparent"])
	}
	svc := must(t, m.services, egressdNS+"/egressd")
	if cfg.DNS.SteerTo != svc.Spec.ClusterIP {
		t.Errorf("dns.steer_to = %q; want the Service's clusterIP %s (its 80 and 443 are the transparent listener)", cfg.DNS.SteerTo, svc.Spec.ClusterIP)
	}
	want := map[int32]string{80: "transparent", 443: "transparent", 1080: "socks"}
	for _, p := range svc.Spec.Ports {
		if target, ok := want[p.Port]; ok {
			if p.Protocol != corev1.ProtocolTCP || p.TargetPort.StrVal != target {
				t.Errorf("service port %d -> %s/%v; want TCP -> %s", p.Port, p.Protocol, p.TargetPort, target)
			}
			delete(want, p.Port)
		}
	}
	if len(want) != 0 {
		t.Errorf("service egressd lacks ports %v", want)
	}
}

// TestKubernetesRedirectOverlay: deploy/kubernetes-redirect adds to the
// example exactly one thing, an init container that DNATs the sandbox
// pod's ports 80 and 443 to egressd's Service with NET_ADMIN, which no
// other container of the pod gets; for it, and only in the sandboxes
// namespace, Pod Security enforcement is privileged while warn and audit
// stay restricted.
func TestKubernetesRedirectOverlay(t *testing.T) {
	base, m := loadManifests(t), loadManifestsAt(t, "kubernetes-redirect")
	svc := must(t, m.services, egressdNS+"/egressd")
	const sandboxKey = sandboxNS + "/sandbox-agent-1"

	ns := must(t, m.namespaces, sandboxNS)
	for mode, want := range map[string]string{"enforce": "privileged", "audit": "restricted", "warn": "restricted"} {
		if got := ns.Labels["pod-security.kubernetes.io/"+mode]; got != want {
			t.Errorf("overlay namespace %s %s = %q; want %q", sandboxNS, mode, got, want)
		}
	}

	pod := must(t, m.deployments, sandboxKey).Spec.Template.Spec
	rest := pod
	rest.InitContainers = nil
	var redirect *corev1.Container
	for i, c := range pod.InitContainers {
		if c.Name == "redirect-to-egressd" {
			redirect = &pod.InitContainers[i]
			continue
		}
		rest.InitContainers = append(rest.InitContainers, c)
	}
	if redirect == nil {
		t.Fatalf("overlay sandbox init containers %v; want redirect-to-egressd", pod.InitContainers)
	}
	// Every other container keeps the restricted profile: no capability,
	// so nothing the agent runs can change the rules.
	checkRestrictedPod(t, "overlay "+sandboxKey, rest)
	sc := redirect.SecurityContext
	if sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN"}) ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || !isTrue(sc.ReadOnlyRootFilesystem) {
		t.Errorf("redirect-to-egressd securityContext = %+v; want drop ALL, add NET_ADMIN only, no escalation, read-only root", sc)
	}
	rules := strings.Join(redirect.Command, " ")
	for _, want := range []string{"hook output", "ip daddr != { 127.0.0.0/8, " + svc.Spec.ClusterIP + " }",
		"tcp dport { 80, 443 } dnat to " + svc.Spec.ClusterIP} {
		if !strings.Contains(rules, want) {
			t.Errorf("redirect-to-egressd command %q lacks %q", rules, want)
		}
	}
	if !strings.Contains(redirect.Image, "egressd-redirect") {
		t.Errorf("redirect-to-egressd image = %q; want the egressd-redirect image", redirect.Image)
	}

	// Nothing else differs from the example.
	if len(m.objects) != len(base.objects) {
		t.Errorf("overlay has %d objects, the example %d; want the same objects", len(m.objects), len(base.objects))
	}
	for o, obj := range base.objects {
		if o == (object{kind: "Namespace", name: sandboxNS}) || o == (object{kind: "Deployment", namespace: sandboxNS, name: "sandbox-agent-1"}) {
			continue
		}
		if !reflect.DeepEqual(obj, m.objects[o]) {
			t.Errorf("overlay changes %s; want it as in the example", o)
		}
	}
	basePod := must(t, base.deployments, sandboxKey).Spec.Template.Spec
	basePod.InitContainers = slices.Clone(basePod.InitContainers)
	if !reflect.DeepEqual(basePod, rest) {
		t.Errorf("overlay sandbox pod differs from the example's beyond redirect-to-egressd")
	}
}
