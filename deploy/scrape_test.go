package deploy

import (
	"os"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// TestPrometheusCanScrape: the manifests give Prometheus a way to
// /metrics (issue 17 item 2) that sandboxes do not have: the
// metrics-only listener on a container port, pod and Service scrape
// annotations naming it, a NetworkPolicy admitting it from a namespace
// other than the sandboxes', while the admin listener stays on loopback.
func TestPrometheusCanScrape(t *testing.T) {
	m := loadManifests(t)
	cfg := m.egressdConfig(t)
	if cfg.Metrics.Listen == "" {
		t.Fatal("egressd-config sets no metrics.listen; Prometheus cannot reach the loopback admin listener")
	}
	metricsPort, err := strconv.Atoi(port(cfg.Metrics.Listen))
	if err != nil {
		t.Fatalf("metrics.listen %q: %v", cfg.Metrics.Listen, err)
	}
	sts := must(t, m.statefulSets, egressdNS+"/egressd")
	c := egressdContainer(t, sts.Spec.Template.Spec)
	var cp *corev1.ContainerPort
	for i := range c.Ports {
		if c.Ports[i].Name == "metrics" {
			cp = &c.Ports[i]
		}
	}
	if cp == nil || int(cp.ContainerPort) != metricsPort || cp.Protocol != corev1.ProtocolTCP {
		t.Errorf("container port metrics = %+v; want TCP %d (metrics.listen)", cp, metricsPort)
	}
	checkScrapeAnnotations(t, "pod template", sts.Spec.Template.Annotations, metricsPort)

	svc := must(t, m.services, egressdNS+"/egressd-metrics")
	checkScrapeAnnotations(t, "service egressd-metrics", svc.Annotations, metricsPort)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "metrics" ||
		svc.Spec.Ports[0].TargetPort != intstr.FromString("metrics") || int(svc.Spec.Ports[0].Port) != metricsPort {
		t.Errorf("service egressd-metrics ports = %+v; want one port metrics → container port metrics", svc.Spec.Ports)
	}
	if svc.Spec.Selector[appLabel] != "egressd" {
		t.Errorf("service egressd-metrics selector = %v; want egressd pods", svc.Spec.Selector)
	}

	var admitted bool
	for key, np := range m.netpols {
		if np.Namespace != egressdNS {
			continue
		}
		for _, rule := range np.Spec.Ingress {
			var metrics bool
			for _, p := range rule.Ports {
				metrics = metrics || (p.Port != nil && p.Port.IntValue() == metricsPort)
			}
			if !metrics {
				continue
			}
			for _, peer := range rule.From {
				if peer.NamespaceSelector == nil || peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == sandboxNS ||
					peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == "" {
					t.Errorf("%s admits port %d from %+v; want one named namespace, never the sandboxes'", key, metricsPort, peer)
				}
			}
			admitted = true
		}
	}
	if !admitted {
		t.Errorf("no NetworkPolicy in %s admits port %d: egressd's ingress policies would drop the scrape", egressdNS, metricsPort)
	}
	if cfg.Admin.Listen != "127.0.0.1:9090" {
		t.Errorf("admin.listen = %q; want it kept on loopback", cfg.Admin.Listen)
	}
}

func checkScrapeAnnotations(t *testing.T, what string, a map[string]string, metricsPort int) {
	t.Helper()
	want := map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": strconv.Itoa(metricsPort), "prometheus.io/path": "/metrics"}
	for k, v := range want {
		if a[k] != v {
			t.Errorf("%s annotation %s = %q; want %q", what, k, a[k], v)
		}
	}
}

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor
// the example uses; decoding is strict, so a field outside it (a typo
// included) fails.
type serviceMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// TestServiceMonitor: the Prometheus Operator example selects exactly the
// egressd-metrics Service and scrapes its metrics port.
func TestServiceMonitor(t *testing.T) {
	b, err := os.ReadFile("kubernetes/monitoring/servicemonitor.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var sm serviceMonitor
	if err := yaml.UnmarshalStrict(b, &sm); err != nil {
		t.Fatalf("servicemonitor.yaml: %v", err)
	}
	if sm.APIVersion != "monitoring.coreos.com/v1" || sm.Kind != "ServiceMonitor" {
		t.Errorf("servicemonitor.yaml is %s %s; want monitoring.coreos.com/v1 ServiceMonitor", sm.APIVersion, sm.Kind)
	}
	m := loadManifests(t)
	for key, svc := range m.services {
		selected := svc.Namespace == egressdNS && len(sm.Spec.Selector.MatchLabels) > 0
		for k, v := range sm.Spec.Selector.MatchLabels {
			selected = selected && svc.Labels[k] == v
		}
		if selected != (key == egressdNS+"/egressd-metrics") {
			t.Errorf("ServiceMonitor selects service %s = %v; want only egressd/egressd-metrics", key, selected)
		}
	}
	if len(sm.Spec.NamespaceSelector.MatchNames) != 1 || sm.Spec.NamespaceSelector.MatchNames[0] != egressdNS {
		t.Errorf("ServiceMonitor namespaces = %v; want [%s]", sm.Spec.NamespaceSelector.MatchNames, egressdNS)
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoints = %+v; want port metrics, path /metrics", sm.Spec.Endpoints)
	}
}
