package deploy

import (
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/egressd/egressd/cmd/egressd/config"
)

// collectorConfig is the part of an OpenTelemetry collector config the
// examples rely on: an OTLP/HTTP receiver and a logs pipeline from it to a
// file exporter.
type collectorConfig struct {
	Receivers struct {
		OTLP struct {
			Protocols struct {
				HTTP struct {
					Endpoint string `yaml:"endpoint"`
				} `yaml:"http"`
			} `yaml:"protocols"`
		} `yaml:"otlp"`
	} `yaml:"receivers"`
	Exporters map[string]map[string]any `yaml:"exporters"`
	Service   struct {
		Pipelines map[string]struct {
			Receivers []string `yaml:"receivers"`
			Exporters []string `yaml:"exporters"`
		} `yaml:"pipelines"`
	} `yaml:"service"`
}

// checkCollector checks a collector config and returns its receiver port.
func checkCollector(t *testing.T, name string, b []byte) string {
	t.Helper()
	var c collectorConfig
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	logs, ok := c.Service.Pipelines["logs"]
	if !ok || !slices.Contains(logs.Receivers, "otlp") || !slices.Contains(logs.Exporters, "file") {
		t.Errorf("%s logs pipeline = %+v; want otlp in, file out", name, logs)
	}
	if path, _ := c.Exporters["file"]["path"].(string); path == "" {
		t.Errorf("%s: file exporter has no path", name)
	}
	_, port, err := net.SplitHostPort(c.Receivers.OTLP.Protocols.HTTP.Endpoint)
	if err != nil {
		t.Fatalf("%s otlp http endpoint %q: %v", name, c.Receivers.OTLP.Protocols.HTTP.Endpoint, err)
	}
	return port
}

// checkEndpoint checks that OTEL_EXPORTER_OTLP_ENDPOINT names host and
// port over plain HTTP.
func checkEndpoint(t *testing.T, where, endpoint, host, port string) {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "http" || u.Hostname() != host || u.Port() != port {
		t.Errorf("%s OTEL_EXPORTER_OTLP_ENDPOINT = %q; want http://%s:%s", where, endpoint, host, port)
	}
}

// TestComposeCollector: the compose example's egressd exports to its
// collector, which only egressd can reach.
func TestComposeCollector(t *testing.T) {
	c := loadCompose(t)
	col, ok := c.Services["otel-collector"]
	if !ok {
		t.Fatal("no otel-collector service")
	}
	if !strings.HasPrefix(col.Image, "otel/opentelemetry-collector:") || strings.HasSuffix(col.Image, ":latest") {
		t.Errorf("otel-collector image = %q; want a pinned otel/opentelemetry-collector", col.Image)
	}
	var cfgFile string
	for _, v := range col.Volumes {
		if src, dst, _ := strings.Cut(v, ":"); strings.HasPrefix(dst, "/etc/otelcol/config.yaml") {
			cfgFile = src
		}
	}
	b, err := os.ReadFile(cfgFile)
	if err != nil {
		t.Fatalf("collector config %q: %v", cfgFile, err)
	}
	port := checkCollector(t, cfgFile, b)
	for n := range col.Networks {
		if !c.Networks[n].Internal {
			t.Errorf("otel-collector is on routable network %s", n)
		}
		if _, ok := c.Services["sandbox"].Networks[n]; ok {
			t.Errorf("otel-collector shares network %s with the sandbox", n)
		}
	}
	checkEndpoint(t, "compose egressd", c.Services["egressd"].Environment["OTEL_EXPORTER_OTLP_ENDPOINT"], "otel-collector", port)
	cfg, err := config.Load("compose/egressd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Audit.Export.OTLP {
		t.Error("compose/egressd.yaml: audit.export.otlp is not set")
	}
}

// TestKubernetesCollector: every egressd replica exports to the
// collector's Service, which admits only egressd's pods.
func TestKubernetesCollector(t *testing.T) {
	m := loadManifests(t)
	port := checkCollector(t, "otel-collector ConfigMap", []byte(must(t, m.configMaps, egressdNS+"/otel-collector").Data["config.yaml"]))
	svc := must(t, m.services, egressdNS+"/otel-collector")
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "otlp-http" {
		t.Fatalf("otel-collector Service ports = %+v", svc.Spec.Ports)
	}
	d := must(t, m.deployments, egressdNS+"/otel-collector")
	c := d.Spec.Template.Spec.Containers[0]
	if len(c.Ports) != 1 || c.Ports[0].Name != "otlp-http" || itoa(c.Ports[0].ContainerPort) != port {
		t.Errorf("otel-collector container ports = %+v; want otlp-http on %s", c.Ports, port)
	}
	if !strings.HasPrefix(c.Image, "otel/opentelemetry-collector:") || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("otel-collector image %q, limits %v; want a pinned collector with a memory limit", c.Image, c.Resources.Limits)
	}
	np := must(t, m.netpols, egressdNS+"/otel-collector-from-egressd")
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 1 ||
		np.Spec.Ingress[0].From[0].PodSelector.MatchLabels["app.kubernetes.io/name"] != "egressd" || np.Spec.Ingress[0].From[0].NamespaceSelector != nil {
		t.Errorf("otel-collector NetworkPolicy ingress = %+v; want egressd's pods only", np.Spec.Ingress)
	}
	eg := egressdContainer(t, must(t, m.statefulSets, egressdNS+"/egressd").Spec.Template.Spec)
	var endpoint string
	for _, e := range eg.Env {
		if e.Name == "OTEL_EXPORTER_OTLP_ENDPOINT" {
			endpoint = e.Value
		}
	}
	checkEndpoint(t, "egressd StatefulSet", endpoint, svc.Name+"."+svc.Namespace+".svc", itoa(svc.Spec.Ports[0].Port))
	if !m.egressdConfig(t).Audit.Export.OTLP {
		t.Error("egressd-config: audit.export.otlp is not set")
	}
}
