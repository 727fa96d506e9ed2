package deploy

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/egressd/egressd/cmd/egressd/config"
)

const (
	egressdNS = "egressd"
	sandboxNS = "sandboxes"
	appLabel  = "app.kubernetes.io/name"
)

// sandboxPorts are egressd's container ports a sandbox may reach: proxy,
// DNS over UDP and TCP, the Postgres gate, SOCKS5 and the transparent
// listener. Nothing else.
var sandboxPorts = []string{"TCP/3128", "UDP/5353", "TCP/5353", "TCP/5432", "TCP/1080", "TCP/15001"}

func TestNamespacesRestricted(t *testing.T) {
	m := loadManifests(t)
	for _, name := range []string{egressdNS, sandboxNS} {
		ns := must(t, m.namespaces, name)
		for _, mode := range []string{"enforce", "audit", "warn"} {
			key := "pod-security.kubernetes.io/" + mode
			if got := ns.Labels[key]; got != "restricted" {
				t.Errorf("namespace %s label %s = %q; want restricted", name, key, got)
			}
		}
	}
}

func TestSandboxNetworkPolicies(t *testing.T) {
	m := loadManifests(t)
	var defaultDeny, allowEgressd int
	for key, np := range m.netpols {
		if np.Namespace != sandboxNS {
			continue
		}
		if len(np.Spec.PodSelector.MatchLabels)+len(np.Spec.PodSelector.MatchExpressions) != 0 {
			t.Errorf("%s selects some sandbox pods only; sandbox policies must select all pods", key)
		}
		if len(np.Spec.Ingress) != 0 {
			t.Errorf("%s allows ingress to sandboxes; want none", key)
		}
		switch {
		case len(np.Spec.Egress) == 0:
			if slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) &&
				slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
				defaultDeny++
			}
		default:
			allowEgressd++
			for i, rule := range np.Spec.Egress {
				checkEgressToEgressdOnly(t, key, i, rule)
			}
		}
	}
	if defaultDeny != 1 {
		t.Errorf("default-deny (Ingress+Egress, no rules) policies in %s = %d; want 1", sandboxNS, defaultDeny)
	}
	if allowEgressd != 1 {
		t.Errorf("egress-allowing policies in %s = %d; want exactly 1 (to egressd)", sandboxNS, allowEgressd)
	}
}

// checkEgressToEgressdOnly asserts one egress rule names only egressd's pods
// in egressd's namespace and only its sandbox-facing ports.
func checkEgressToEgressdOnly(t *testing.T, key string, i int, rule networkingv1.NetworkPolicyEgressRule) {
	t.Helper()
	if len(rule.To) == 0 {
		t.Errorf("%s egress[%d] has no peers: that allows every destination", key, i)
	}
	for j, peer := range rule.To {
		if peer.IPBlock != nil || peer.NamespaceSelector == nil || peer.PodSelector == nil ||
			peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != egressdNS ||
			peer.PodSelector.MatchLabels[appLabel] != "egressd" {
			t.Errorf("%s egress[%d].to[%d] = %+v; want egressd pods in namespace %s only", key, i, j, peer, egressdNS)
		}
	}
	var got []string
	for _, p := range rule.Ports {
		if p.Protocol == nil || p.Port == nil || p.EndPort != nil {
			t.Errorf("%s egress[%d] port %+v; want explicit protocol and single port", key, i, p)
			continue
		}
		got = append(got, string(*p.Protocol)+"/"+p.Port.String())
	}
	if !sameSet(got, sandboxPorts) {
		t.Errorf("%s egress[%d] ports = %q; want %q", key, i, got, sandboxPorts)
	}
}

func TestEgressdStatefulSet(t *testing.T) {
	m := loadManifests(t)
	sts := must(t, m.statefulSets, egressdNS+"/egressd")
	pod := sts.Spec.Template.Spec

	if sts.Spec.Replicas != nil {
		t.Errorf("replicas = %d; want unset: the HorizontalPodAutoscaler owns the count, and apply would reset it", *sts.Spec.Replicas)
	}
	if sts.Spec.Template.Labels[appLabel] != "egressd" || sts.Spec.Selector.MatchLabels[appLabel] != "egressd" {
		t.Errorf("pod template/selector label %s = %q/%q; want egressd", appLabel,
			sts.Spec.Template.Labels[appLabel], sts.Spec.Selector.MatchLabels[appLabel])
	}
	aa := pod.Affinity
	if aa == nil || aa.PodAntiAffinity == nil {
		t.Fatal("pod anti-affinity missing")
	}
	var spread bool
	for _, w := range aa.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		spread = spread || (w.PodAffinityTerm.TopologyKey == "kubernetes.io/hostname" &&
			w.PodAffinityTerm.LabelSelector != nil && w.PodAffinityTerm.LabelSelector.MatchLabels[appLabel] == "egressd")
	}
	for _, term := range aa.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		spread = spread || (term.TopologyKey == "kubernetes.io/hostname" &&
			term.LabelSelector != nil && term.LabelSelector.MatchLabels[appLabel] == "egressd")
	}
	if !spread {
		t.Error("anti-affinity does not spread egressd pods over kubernetes.io/hostname")
	}

	checkRestrictedPod(t, "egressd", pod)
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken must be false: egressd needs no API access")
	}

	var audit bool
	for _, pvc := range sts.Spec.VolumeClaimTemplates {
		audit = audit || pvc.Name == "audit"
	}
	if !audit {
		t.Error("volumeClaimTemplates has no \"audit\" claim; each replica needs its own audit volume")
	}
	c := egressdContainer(t, pod)
	var reloader bool
	for _, side := range pod.Containers {
		reloader = reloader || (side.Name != "egressd" && strings.Contains(strings.Join(side.Command, " "), "/-/reload"))
	}
	if !reloader {
		t.Error("no sidecar asks egressd to reload (POST /-/reload) when the ConfigMaps change")
	}
	for _, probe := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if probe == nil || probe.Exec == nil || len(probe.Exec.Command) < 2 || probe.Exec.Command[1] != "health" {
			t.Errorf("probe %+v; want exec egressd health (the admin listener is loopback-only)", probe)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() {
		t.Error("container has no CPU request; the HPA's utilization target needs one")
	}
	for _, vm := range c.VolumeMounts {
		if vm.SubPath != "" {
			t.Errorf("mount %s uses subPath; subPath mounts never see ConfigMap updates", vm.Name)
		}
		if vm.Name != "audit" && !vm.ReadOnly {
			t.Errorf("mount %s is writable; only the audit volume may be", vm.Name)
		}
	}
}

func egressdContainer(t *testing.T, pod corev1.PodSpec) corev1.Container {
	t.Helper()
	for _, c := range pod.Containers {
		if c.Name == "egressd" {
			return c
		}
	}
	t.Fatal("pod has no container named egressd")
	return corev1.Container{}
}

// checkRestrictedPod asserts the restricted Pod Security settings at pod or
// container level: non-root, no privilege escalation, read-only root, all
// capabilities dropped, RuntimeDefault seccomp.
func checkRestrictedPod(t *testing.T, name string, pod corev1.PodSpec) {
	t.Helper()
	psc := pod.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("%s container %s has no securityContext", name, c.Name)
			continue
		}
		if !isTrue(sc.RunAsNonRoot) && !isTrue(psc.RunAsNonRoot) {
			t.Errorf("%s container %s: runAsNonRoot not set", name, c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s container %s: allowPrivilegeEscalation must be false", name, c.Name)
		}
		if !isTrue(sc.ReadOnlyRootFilesystem) {
			t.Errorf("%s container %s: readOnlyRootFilesystem must be true", name, c.Name)
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
			t.Errorf("%s container %s: capabilities = %+v; want drop [ALL], add none", name, c.Name, sc.Capabilities)
		}
		seccomp := sc.SeccompProfile
		if seccomp == nil {
			seccomp = psc.SeccompProfile
		}
		if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s container %s: seccompProfile = %+v; want RuntimeDefault", name, c.Name, seccomp)
		}
	}
}

func TestServiceMatchesContainerPorts(t *testing.T) {
	m := loadManifests(t)
	svc := must(t, m.services, egressdNS+"/egressd")
	sts := must(t, m.statefulSets, egressdNS+"/egressd")
	named := map[string]corev1.ContainerPort{}
	for _, p := range egressdContainer(t, sts.Spec.Template.Spec).Ports {
		named[p.Name] = p
	}
	want := map[string]int32{"proxy": 3128, "dns-udp": 53, "dns-tcp": 53, "postgres": 5432,
		"socks": 1080, "http": 80, "https": 443}
	for _, p := range svc.Spec.Ports {
		cp, ok := named[p.TargetPort.StrVal]
		if p.TargetPort.Type != intstr.String || !ok || cp.Protocol != p.Protocol {
			t.Errorf("service port %s targets %v; want a container port name with protocol %s", p.Name, p.TargetPort, p.Protocol)
		}
		if want[p.Name] != p.Port {
			t.Errorf("service port %s = %d; want %d", p.Name, p.Port, want[p.Name])
		}
		delete(want, p.Name)
	}
	if len(want) != 0 {
		t.Errorf("service lacks ports %v", want)
	}
	if svc.Spec.Selector[appLabel] != "egressd" {
		t.Errorf("service selector = %v; want %s=egressd", svc.Spec.Selector, appLabel)
	}
	if _, err := netip.ParseAddr(svc.Spec.ClusterIP); err != nil {
		t.Errorf("service clusterIP = %q; want a fixed IP (sandboxes use it as their resolver)", svc.Spec.ClusterIP)
	}
}

func TestAvailability(t *testing.T) {
	m := loadManifests(t)
	pdb := must(t, m.pdbs, egressdNS+"/egressd")
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < 1 {
		t.Errorf("pdb minAvailable = %v; want >= 1", pdb.Spec.MinAvailable)
	}
	if pdb.Spec.Selector == nil || pdb.Spec.Selector.MatchLabels[appLabel] != "egressd" {
		t.Errorf("pdb selector = %v; want %s=egressd", pdb.Spec.Selector, appLabel)
	}
	hpa := must(t, m.hpas, egressdNS+"/egressd")
	ref := hpa.Spec.ScaleTargetRef
	if ref.Kind != "StatefulSet" || ref.Name != "egressd" {
		t.Errorf("hpa target = %s/%s; want StatefulSet/egressd", ref.Kind, ref.Name)
	}
	if hpa.Spec.MinReplicas == nil || *hpa.Spec.MinReplicas < 2 || hpa.Spec.MaxReplicas < *hpa.Spec.MinReplicas {
		t.Errorf("hpa replicas = %v..%d; want min >= 2 <= max", hpa.Spec.MinReplicas, hpa.Spec.MaxReplicas)
	}
}

// egressdConfig parses the egressd-config ConfigMap's egressd.yaml with
// egressd's own strict loader.
func (m *manifests) egressdConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(must(t, m.configMaps, egressdNS+"/egressd-config").Data["egressd.yaml"]))
	if err != nil {
		t.Fatalf("config.Parse(egressd-config egressd.yaml) = %v", err)
	}
	return cfg
}

// TestConfigMapConfig parses the egressd.yaml in the ConfigMap with
// egressd's own strict loader and checks it agrees with the pod spec.
func TestConfigMapConfig(t *testing.T) {
	m := loadManifests(t)
	cfg := m.egressdConfig(t)
	pod := must(t, m.statefulSets, egressdNS+"/egressd").Spec.Template.Spec
	c := egressdContainer(t, pod)
	mounts := map[string]string{}
	for _, vm := range c.VolumeMounts {
		mounts[vm.Name] = vm.MountPath
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	checks := []struct {
		name      string
		got, want string
	}{
		{"config mount", mounts["config"] + "/egressd.yaml", argAfter(c.Args, "--config")},
		{"policy.dir", cfg.Policy.Dir, mounts["policy"]},
		{"audit.dir", cfg.Audit.Dir, mounts["audit"]},
		{"inspect.ca_dir", cfg.Inspect.CADir, mounts["ca"]},
		{"proxy.listen port", port(cfg.Proxy.Listen), itoa(ports["proxy"])},
		{"dns.listen port", port(cfg.DNS.Listen), itoa(ports["dns-udp"])},
		{"postgres.listen port", port(cfg.Postgres.Listen), itoa(ports["postgres"])},
		{"postgres.password_env", envFromSecret(c, cfg.Postgres.PasswordEnv), cfg.Postgres.PasswordEnv},
		{"admin.listen", cfg.Admin.Listen, "127.0.0.1:9090"}, // egressd health's default
	}
	for _, tt := range checks {
		if tt.got != tt.want {
			t.Errorf("%s = %q; want %q", tt.name, tt.got, tt.want)
		}
	}
	if ports["dns-tcp"] != ports["dns-udp"] {
		t.Errorf("dns ports tcp %d, udp %d; want equal", ports["dns-tcp"], ports["dns-udp"])
	}
}

// TestSandboxExample checks the example sandbox is restricted, uses
// egressd's Service IP as its only resolver and proxy, and sets no NO_PROXY.
func TestSandboxExample(t *testing.T) {
	m := loadManifests(t)
	svc := must(t, m.services, egressdNS+"/egressd")
	for key, d := range m.sandboxes() {
		pod := d.Spec.Template.Spec
		checkRestrictedPod(t, key, pod)
		if pod.DNSPolicy != corev1.DNSNone || pod.DNSConfig == nil ||
			!slices.Equal(pod.DNSConfig.Nameservers, []string{svc.Spec.ClusterIP}) {
			t.Errorf("%s dns = %s %+v; want dnsPolicy None, nameservers [%s]", key, pod.DNSPolicy, pod.DNSConfig, svc.Spec.ClusterIP)
		}
		for _, c := range pod.Containers {
			env := map[string]string{}
			for _, e := range c.Env {
				env[strings.ToUpper(e.Name)] = e.Value
			}
			for _, v := range []string{"HTTP_PROXY", "HTTPS_PROXY"} {
				if !strings.Contains(env[v], "@"+svc.Spec.ClusterIP+":3128") {
					t.Errorf("%s %s = %q; want egressd's proxy at %s:3128", key, v, env[v], svc.Spec.ClusterIP)
				}
			}
			for _, v := range []string{"ALL_PROXY", "all_proxy"} {
				if got := envValue(c, v); !strings.HasPrefix(got, "socks5h://") || !strings.HasSuffix(got, "@"+svc.Spec.ClusterIP+":1080") {
					t.Errorf("%s %s = %q; want socks5h:// to egressd's SOCKS5 listener at %s:1080", key, v, got, svc.Spec.ClusterIP)
				}
			}
			if _, ok := env["NO_PROXY"]; ok {
				t.Errorf("%s sets NO_PROXY; want it unset", key)
			}
			if !strings.Contains(env["DATABASE_URL"], "@"+svc.Spec.ClusterIP+":5432/") {
				t.Errorf("%s DATABASE_URL = %q; want the gate at %s:5432", key, env["DATABASE_URL"], svc.Spec.ClusterIP)
			}
		}
	}
	if len(m.sandboxes()) == 0 {
		t.Error("no example sandbox Deployment")
	}
}

// envFromSecret returns name if the container sets it from a Secret key
// that is not optional (so a missing Secret stops the pod instead of
// starting a gate without credentials), else "".
func envFromSecret(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && !isTrue(e.ValueFrom.SecretKeyRef.Optional) {
			return name
		}
	}
	return ""
}

// TestSandboxCredentials checks the example sandbox's Secret holds the
// token and gate password behind its identity's hashes, so the example
// can actually log in.
func TestSandboxCredentials(t *testing.T) {
	m := loadManifests(t)
	cfg := m.egressdConfig(t)
	secret := must(t, m.secrets, sandboxNS+"/sandbox-agent-1")
	var found bool
	for _, id := range cfg.Identities {
		if id.ID != "agent-1" {
			continue
		}
		found = true
		sum := sha256.Sum256([]byte(secret.StringData["proxy-token"]))
		if got := hex.EncodeToString(sum[:]); got != id.TokenSHA256 {
			t.Errorf("agent-1 token_sha256 = %s; the Secret's proxy-token hashes to %s", id.TokenSHA256, got)
		}
		if got := recomputeVerifier(t, id.SCRAMSHA256, secret.StringData["pg-password"]); got != id.SCRAMSHA256 {
			t.Errorf("agent-1 scram_sha256 = %q; the Secret's pg-password gives %q", id.SCRAMSHA256, got)
		}
	}
	if !found {
		t.Error("egressd-config has no identity agent-1 for the example sandbox")
	}
}
