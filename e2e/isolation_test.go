package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/dnsguard/dnstest"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/internal/pgtest"
	"github.com/egressd/egressd/internal/testwait"
)

// Ports of the upstream services inside the upstream namespace.
const (
	upHTTPPort  = "8080"
	upHTTPSPort = "8443"
)

// sandboxPGPassword is the sandbox identity's gate password; the upstream's
// own credentials stay with egressd.
const sandboxPGPassword = "sandbox-gate-password"

// TestIsolation proves the deployment shape: a sandbox whose only link is
// to egressd reaches upstreams through egressd's listeners, on egressd's
// terms, and not at all on its own.
func TestIsolation(t *testing.T) {
	topo := newTopology(t)
	for _, tool := range []string{"curl", "dig", "getent", "psql"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is required in the sandbox namespace: %v", tool, err)
		}
	}

	// Upstreams: the test's loopback fixtures, reachable only at
	// upstreamAddr inside the upstream namespace.
	httpUp := StartHTTP(t)
	httpsUp := StartHTTPS(t)
	dns := dnstest.Start(t)
	for _, name := range []string{"allowed.test", "denied.test", "example.com", "secret.test"} {
		dns.SetRR(name, name+". 60 IN A "+upstreamAddr)
	}
	expose(t, topo.upstream, "tcp", upstreamAddr+":"+upHTTPPort, httpUp.Addr)
	expose(t, topo.upstream, "tcp", upstreamAddr+":"+upHTTPSPort, httpsUp.Addr)
	expose(t, topo.upstream, "udp", upstreamAddr+":53", dns.Addr())
	expose(t, topo.upstream, "tcp", upstreamAddr+":53", dns.Addr())

	pg := startAppDB(t, "CREATE TABLE items (id int PRIMARY KEY, name text); INSERT INTO items VALUES (1, 'one')")
	expose(t, topo.upstream, "tcp", upstreamAddr+":5432", pg.Addr())
	verifier, err := identity.SCRAMVerifier(sandboxPGPassword, nil, 0)
	if err != nil {
		t.Fatal(err)
	}

	policy := WritePolicy(t, []Rule{
		{ID: "allowed-http", Hosts: []string{"allowed.test"}, Ports: []int{8080}},
		{ID: "allowed-tls", Hosts: []string{"example.com"}, Ports: []int{8443}},
	})
	// The sandbox is identified by its address, so its curl and dig need
	// no credentials; its gate login is the identity's SCRAM password.
	eg := startInNetns(t, topo.egressd, fmt.Sprintf(`log:
  level: debug
proxy:
  listen: %[1]s:3128
admin:
  listen: 127.0.0.1:9090
policy:
  dir: %[2]s
dns:
  upstreams: ["%[3]s:53"]
  listen: %[1]s:53
postgres:
  listen: %[1]s:5432
  upstream: "host=%[3]s port=5432 user=%[4]s sslmode=disable"
  password_env: EGRESSD_E2E_UPSTREAM_PASSWORD
identities:
  - id: agent
    sources: [%[5]s/32]
    scram_sha256: %[6]q
    attributes:
      sql_profile: read_only
%[7]s`, egressdSbAddr, policy, upstreamAddr, pgtest.SuperUser, sandboxAddr, verifier,
		InternalAllow(upstreamAddr+":"+upHTTPPort, upstreamAddr+":"+upHTTPSPort, upstreamAddr+":5432")),
		"EGRESSD_E2E_UPSTREAM_PASSWORD="+pgtest.SuperPassword)

	proxyURL := "http://" + egressdSbAddr + ":3128"
	viaProxy := []string{"HTTP_PROXY=" + proxyURL, "HTTPS_PROXY=" + proxyURL, "http_proxy=" + proxyURL, "https_proxy=" + proxyURL}

	t.Run("proxy", func(t *testing.T) {
		// curl prints the origin's status, then the proxy's answer to
		// CONNECT (000 when there was none).
		tests := []struct {
			name string
			args []string
			want string
		}{
			{name: "allowed http", args: []string{"http://allowed.test:8080/"}, want: "200 000"},
			{name: "denied http", args: []string{"http://denied.test:8080/"}, want: "403 000"},
			{name: "allowed tls tunnel", args: []string{"--cacert", httpsUp.CAFile, "https://example.com:8443/"}, want: "200 200"},
			{name: "denied tunnel", args: []string{"--cacert", httpsUp.CAFile, "https://denied.test:8443/"}, want: "000 403"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				args := append([]string{"curl", "-sS", "--max-time", "10", "-o", "/dev/null",
					"-w", "%{http_code} %{http_connect}"}, tt.args...)
				out, _ := nsRunEnv(t, topo.sandbox, viaProxy, args...)
				if got := lastLine(out); got != tt.want {
					t.Errorf("curl %q via egressd = %q; want %q", tt.args, out, tt.want)
				}
			})
		}
	})

	t.Run("dns only through the guard", func(t *testing.T) {
		for _, transport := range []string{"+notcp", "+tcp"} {
			dig := func(server, name string) (string, int) {
				return nsRun(t, topo.sandbox, "dig", transport, "+time=2", "+tries=1", "@"+server, name, "A")
			}
			out, code := dig(egressdSbAddr, "allowed.test")
			if code != 0 || !strings.Contains(out, "status: NOERROR") || !strings.Contains(out, upstreamAddr) {
				t.Errorf("dig %s @egressd allowed.test = exit %d\n%s; want NOERROR with %s", transport, code, out, upstreamAddr)
			}
			out, _ = dig(egressdSbAddr, "secret.test")
			if !strings.Contains(out, "status: REFUSED") {
				t.Errorf("dig %s @egressd secret.test =\n%s; want REFUSED", transport, out)
			}
			if out, code := dig(upstreamAddr, "allowed.test"); code == 0 {
				t.Errorf("dig %s straight to the upstream resolver succeeded:\n%s; want no route", transport, out)
			}
		}
		if n := dns.Queries("secret.test"); n != 0 {
			t.Errorf("upstream resolver saw %d queries for refused secret.test; want 0 (refused names are never forwarded)", n)
		}
		// The sandbox's system resolver is egressd (resolv.conf); the
		// answer it gets still cannot be dialled without the proxy.
		if out := nsMustRun(t, topo.sandbox, "getent", "hosts", "allowed.test"); !strings.Contains(out, upstreamAddr) {
			t.Errorf("getent hosts allowed.test = %q; want %s", out, upstreamAddr)
		}
		if out, code := nsRun(t, topo.sandbox, "curl", "-sS", "--connect-timeout", "2", "--max-time", "4", "http://allowed.test:8080/"); code == 0 {
			t.Errorf("curl by name without the proxy succeeded: %s; want no route", out)
		}
	})

	t.Run("postgres only through the gate", func(t *testing.T) {
		psql := func(host, user, password, sql string) (string, int) {
			return nsRunEnv(t, topo.sandbox, []string{"PGPASSWORD=" + password, "PGCONNECT_TIMEOUT=3"},
				"psql", "-X", "-w", "-h", host, "-U", user, "-d", "app", "-At",
				"-v", "ON_ERROR_STOP=1", "-v", "VERBOSITY=verbose", "-c", sql)
		}
		out, code := psql(egressdSbAddr, "agent", sandboxPGPassword, "SELECT name FROM items WHERE id = 1")
		if code != 0 || lastLine(out) != "one" {
			t.Errorf("psql via the gate SELECT = %q (exit %d); want one", out, code)
		}
		out, code = psql(egressdSbAddr, "agent", sandboxPGPassword, "DELETE FROM items")
		if code == 0 || !strings.Contains(out, "42501") {
			t.Errorf("psql via the gate DELETE (read_only profile) = %q (exit %d); want SQLSTATE 42501", out, code)
		}
		// The upstream's own credentials do not open the gate, and the
		// upstream itself is not routable from the sandbox.
		if out, code := psql(egressdSbAddr, pgtest.SuperUser, pgtest.SuperPassword, "SELECT 1"); code == 0 {
			t.Errorf("psql via the gate as the upstream superuser succeeded: %q; want refused", out)
		}
		if out, code := psql(upstreamAddr, pgtest.SuperUser, pgtest.SuperPassword, "SELECT 1"); code == 0 {
			t.Errorf("psql straight to the upstream succeeded: %q; want no route", out)
		}
	})

	t.Run("audited", func(t *testing.T) {
		tests := []struct {
			host     string
			kind     audit.Kind
			decision audit.Decision
		}{
			{"allowed.test", "http", "allow"},
			{"denied.test", "http", "deny"},
			{"example.com", "connect", "allow"},
			{"denied.test", "connect", "deny"},
			{"allowed.test", "dns", "allow"},
			{"secret.test", "dns", "deny"},
		}
		eg.WaitRecords(t, "sql deny from the sandbox", func(r audit.Record) bool {
			return r.Kind == "sql" && r.Decision == "deny" && r.Identity == "agent" && strings.HasPrefix(r.Client, sandboxAddr)
		})
		for _, tt := range tests {
			desc := fmt.Sprintf("%s %s %s from %s", tt.kind, tt.host, tt.decision, sandboxAddr)
			eg.WaitRecords(t, desc, func(r audit.Record) bool {
				return r.Kind == tt.kind && (r.Host == tt.host || r.Name == tt.host) && r.Decision == tt.decision &&
					strings.HasPrefix(r.Client, sandboxAddr)
			})
		}
	})

	t.Run("no route around egressd", func(t *testing.T) {
		tests := []struct {
			name string
			args []string
		}{
			{name: "http upstream", args: []string{"curl", "-sS", "--connect-timeout", "2", "--max-time", "4", "http://" + upstreamAddr + ":" + upHTTPPort + "/"}},
			{name: "https upstream", args: []string{"curl", "-sS", "-k", "--connect-timeout", "2", "--max-time", "4", "https://" + upstreamAddr + ":" + upHTTPSPort + "/"}},
			{name: "egressd admin", args: []string{"curl", "-sS", "--connect-timeout", "2", "--max-time", "4", "http://" + egressdSbAddr + ":9090/readyz"}},
			{name: "egressd upstream-side address", args: []string{"curl", "-sS", "--connect-timeout", "2", "--max-time", "4", "http://" + egressdUpAddr + ":3128/"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				out, code := nsRun(t, topo.sandbox, tt.args...)
				if code == 0 {
					t.Errorf("%q from the sandbox without the proxy succeeded: %s; want a connection failure", tt.args, out)
				}
			})
		}
		// The same upstream answers from egressd's namespace: the failure
		// above is the missing route, not a dead upstream.
		out, code := nsRun(t, topo.egressd, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "4",
			"http://"+upstreamAddr+":"+upHTTPPort+"/")
		if code != 0 || out != "200" {
			t.Errorf("curl upstream from egressd's namespace = %q (exit %d); want 200", out, code)
		}
	})
}

// startInNetns runs `egressd serve` inside ns with cfg (plus an audit
// directory) and env (added to the test's own environment), and waits until
// `egressd health` reports ready; health runs in the same namespace because
// the admin listener is loopback-only. egressd is stopped with SIGTERM when
// the test ends, and its log is printed if the test failed. The result
// serves the harness's audit helpers.
func startInNetns(t *testing.T, ns, cfg string, env ...string) *Egressd {
	t.Helper()
	dir := t.TempDir()
	e := &Egressd{
		AuditDir:   filepath.Join(dir, "audit"),
		ConfigPath: filepath.Join(dir, "egressd.yaml"),
		LogPath:    filepath.Join(dir, "egressd.log"),
	}
	cfg += fmt.Sprintf("audit:\n  dir: %s\n", e.AuditDir)
	if err := os.WriteFile(e.ConfigPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, binary, "serve", "--config", e.ConfigPath)
	cmd.Env = append(cleanEnv(), env...)
	if err := e.launch(cmd); err != nil {
		t.Fatalf("start egressd in %s: %v", ns, err)
	}
	// ip netns exec execs egressd in place, so Stop signals egressd itself.
	e.stopAtEnd(t)
	testwait.For(t, "egressd health in "+ns+" to pass", 20*time.Second, func() error {
		if e.Exited() {
			t.Fatalf("egressd exited before ready: %v\n%s", e.err, e.Log())
		}
		if out, code := nsRun(t, ns, binary, "health", "--admin", "127.0.0.1:9090"); code != 0 {
			return fmt.Errorf("egressd health = %d: %s", code, lastLine(out))
		}
		return nil
	})
	return e
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndex(s, "\n")+1:]
}
