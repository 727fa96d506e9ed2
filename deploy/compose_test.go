package deploy

import (
	"bytes"
	"encoding/base64"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/egressd/egressd/internal/identity"
	"gopkg.in/yaml.v3"
)

// compose is the subset of the Compose specification this deployment uses,
// decoded with unknown keys refused so a misspelt key (say `interal:`)
// fails here instead of silently giving the sandbox a route out.
type compose struct {
	Name     string                    `yaml:"name"`
	Networks map[string]composeNetwork `yaml:"networks"`
	Volumes  map[string]struct{}       `yaml:"volumes"`
	Services map[string]composeService `yaml:"services"`
}

type composeNetwork struct {
	Internal bool `yaml:"internal"`
	IPAM     struct {
		Config []struct {
			Subnet string `yaml:"subnet"`
		} `yaml:"config"`
	} `yaml:"ipam"`
}

type composeService struct {
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Image       string            `yaml:"image"`
	PullPolicy  string            `yaml:"pull_policy"`
	Command     []string          `yaml:"command"`
	ReadOnly    bool              `yaml:"read_only"`
	User        string            `yaml:"user"`
	CapDrop     []string          `yaml:"cap_drop"`
	CapAdd      []string          `yaml:"cap_add"`
	SecurityOpt []string          `yaml:"security_opt"`
	Sysctls     map[string]string `yaml:"sysctls"`
	Volumes     []string          `yaml:"volumes"`
	Networks    map[string]struct {
		IPv4Address string `yaml:"ipv4_address"`
	} `yaml:"networks"`
	Restart     string            `yaml:"restart"`
	Environment map[string]string `yaml:"environment"`
	DNS         []string          `yaml:"dns"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Tmpfs       []string `yaml:"tmpfs"`
	NetworkMode string   `yaml:"network_mode"`
	Healthcheck *struct {
		Test        []string `yaml:"test"`
		Interval    string   `yaml:"interval"`
		Timeout     string   `yaml:"timeout"`
		StartPeriod string   `yaml:"start_period"`
		Retries     int      `yaml:"retries"`
	} `yaml:"healthcheck"`
	StopGracePeriod string `yaml:"stop_grace_period"`
	MemLimit        string `yaml:"mem_limit"`
	PidsLimit       int    `yaml:"pids_limit"`
}

func loadCompose(t *testing.T) *compose {
	t.Helper()
	b, err := os.ReadFile("docker-compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("decode docker-compose.yaml: %v", err)
	}
	return &c
}

func TestCompose(t *testing.T) {
	c := loadCompose(t)
	for _, name := range []string{"sandbox", "db"} {
		if !c.Networks[name].Internal {
			t.Errorf("network %s internal = false; want true (no route out)", name)
		}
	}
	networksOf := func(svc string) []string {
		var ns []string
		for n := range c.Services[svc].Networks {
			ns = append(ns, n)
		}
		return ns
	}
	// The sandbox and its redirect step join sandbox-net's namespace
	// (network_mode), which is on `sandbox` only.
	wantNetworks := map[string][]string{
		"egressd":        {"sandbox", "db", "telemetry", "egress"},
		"sandbox-net":    {"sandbox"},
		"postgres":       {"db"},
		"otel-collector": {"telemetry"},
	}
	for svc, want := range wantNetworks {
		if got := networksOf(svc); !sameSet(got, want) {
			t.Errorf("service %s networks = %q; want %q", svc, got, want)
		}
	}
	for name, n := range c.Networks {
		if n.Internal {
			continue
		}
		for svc, s := range c.Services {
			if _, on := s.Networks[name]; on && svc != "egressd" {
				t.Errorf("service %s is on routable network %s; only egressd may be", svc, name)
			}
		}
	}

	egressdIP := c.Services["egressd"].Networks["sandbox"].IPv4Address
	sb := c.Services["sandbox"]
	for _, v := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		if want := "http://" + egressdIP + ":3128"; sb.Environment[v] != want {
			t.Errorf("sandbox %s = %q; want %q", v, sb.Environment[v], want)
		}
	}
	for k := range sb.Environment {
		if strings.EqualFold(k, "NO_PROXY") {
			t.Errorf("sandbox sets %s; want it unset", k)
		}
	}
	if sbNet := c.Services["sandbox-net"]; !slices.Equal(sbNet.DNS, []string{egressdIP}) {
		t.Errorf("sandbox-net dns = %q; want [%s]", sbNet.DNS, egressdIP)
	}
	if !strings.Contains(sb.Environment["DATABASE_URL"], "@"+egressdIP+":5432/") {
		t.Errorf("sandbox DATABASE_URL = %q; want the gate at %s:5432", sb.Environment["DATABASE_URL"], egressdIP)
	}
	e := c.Services["egressd"]
	if !e.ReadOnly || !slices.Equal(e.CapDrop, []string{"ALL"}) || e.User == "" || strings.HasPrefix(e.User, "0") {
		t.Errorf("egressd read_only=%v cap_drop=%q user=%q; want read-only, drop ALL, non-root", e.ReadOnly, e.CapDrop, e.User)
	}
}

// TestComposeConfig parses the mounted egressd.yaml with egressd's loader
// and checks its listeners and directories match the compose file.
func TestComposeConfig(t *testing.T) {
	c := loadCompose(t)
	e := c.Services["egressd"]
	mounts := map[string]string{} // container path → "source:mode"
	for _, v := range e.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 {
			t.Fatalf("egressd volume %q; want source:target[:mode]", v)
		}
		mode := ""
		if len(parts) == 3 {
			mode = parts[2]
		}
		mounts[parts[1]] = parts[0] + ":" + mode
	}
	cfgPath := argAfter(e.Command, "--config")
	src, ok := mounts[cfgPath]
	if !ok || !strings.HasSuffix(src, ":ro") {
		t.Fatalf("config %q mount = %q; want a read-only mount", cfgPath, src)
	}
	cfg := parseConfigFile(t, strings.TrimSuffix(src, ":ro"))
	if m := mounts[cfg.Policy.Dir]; !strings.HasSuffix(m, ":ro") {
		t.Errorf("policy.dir %q mount = %q; want read-only", cfg.Policy.Dir, m)
	}
	if m := mounts[cfg.Audit.Dir]; m == "" || strings.HasPrefix(m, ".") || strings.HasPrefix(m, "/") {
		t.Errorf("audit.dir %q mount = %q; want a named volume", cfg.Audit.Dir, m)
	}
	if m := mounts[cfg.Inspect.CADir]; m == "" || strings.HasPrefix(m, ".") || strings.HasPrefix(m, "/") {
		t.Errorf("inspect.ca_dir %q mount = %q; want a named volume (the root filesystem is read-only)", cfg.Inspect.CADir, m)
	}
	ip := e.Networks["sandbox"].IPv4Address
	for key, listen := range map[string]string{"proxy.listen": cfg.Proxy.Listen, "dns.listen": cfg.DNS.Listen} {
		ap, err := netip.ParseAddrPort(listen)
		if err != nil || ap.Addr().String() != ip {
			t.Errorf("%s = %q; want egressd's sandbox-network address %s", key, listen, ip)
		}
	}
	if cfg.Postgres.Listen != ip+":5432" {
		t.Errorf("postgres.listen = %q; want %s:5432", cfg.Postgres.Listen, ip)
	}
	pgIP := c.Services["postgres"].Networks["db"].IPv4Address
	if !strings.Contains(cfg.Postgres.Upstream, "host="+pgIP+" ") {
		t.Errorf("postgres.upstream = %q; want host=%s (the postgres service)", cfg.Postgres.Upstream, pgIP)
	}
	var floorAllows bool
	for _, r := range cfg.Internal {
		floorAllows = floorAllows || (r.Action == "allow" && r.CIDR == pgIP+"/32" && slices.Contains(r.Ports, 5432))
	}
	if !floorAllows {
		t.Errorf("internal: %+v; want an allow for %s/32 port 5432 (the gate's upstream)", cfg.Internal, pgIP)
	}
	if got, want := e.Environment[cfg.Postgres.PasswordEnv], c.Services["postgres"].Environment["POSTGRES_PASSWORD"]; got == "" || got != want {
		t.Errorf("egressd %s = %q; want the postgres service's POSTGRES_PASSWORD %q", cfg.Postgres.PasswordEnv, got, want)
	}
	if port(cfg.DNS.Listen) != "53" {
		t.Errorf("dns.listen = %q; want port 53 (Docker's resolver forwards only there)", cfg.DNS.Listen)
	}
	if e.Sysctls["net.ipv4.ip_unprivileged_port_start"] != "53" {
		t.Errorf("egressd sysctl ip_unprivileged_port_start = %q; want 53 so non-root can bind DNS", e.Sysctls["net.ipv4.ip_unprivileged_port_start"])
	}
	sandboxIP := c.Services["sandbox-net"].Networks["sandbox"].IPv4Address
	var mapped bool
	for _, id := range cfg.Identities {
		mapped = mapped || slices.Contains(id.Sources, sandboxIP+"/32")
	}
	if !mapped {
		t.Errorf("no identity has sources [%s/32]; the example sandbox would be anonymous", sandboxIP)
	}

	// The sandbox's PGPASSWORD must be the password behind its identity's
	// verifier, or the example cannot log in to the gate.
	user := strings.TrimPrefix(strings.SplitN(c.Services["sandbox"].Environment["DATABASE_URL"], "@", 2)[0], "postgres://")
	var verifier string
	for _, id := range cfg.Identities {
		if id.ID == user {
			verifier = id.SCRAMSHA256
		}
	}
	if got := recomputeVerifier(t, verifier, c.Services["sandbox"].Environment["PGPASSWORD"]); got != verifier {
		t.Errorf("identity %q scram_sha256 = %q; PGPASSWORD gives %q", user, verifier, got)
	}
}

// recomputeVerifier derives the verifier for password with the salt and
// iteration count of verifier ("SCRAM-SHA-256$<iter>:<salt>$…").
func recomputeVerifier(t *testing.T, verifier, password string) string {
	t.Helper()
	head, _, _ := strings.Cut(strings.TrimPrefix(verifier, "SCRAM-SHA-256$"), "$")
	iterS, saltS, _ := strings.Cut(head, ":")
	iter, err1 := strconv.Atoi(iterS)
	salt, err2 := base64.StdEncoding.DecodeString(saltS)
	if err1 != nil || err2 != nil {
		t.Fatalf("verifier %q: want SCRAM-SHA-256$<iter>:<salt>$…", verifier)
	}
	v, err := identity.SCRAMVerifier(password, salt, iter)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
