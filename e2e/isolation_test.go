package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/egressd/egressd/dnsguard/dnstest"
)

// Ports of the upstream services inside the upstream namespace.
const (
	upHTTPPort  = "8080"
	upHTTPSPort = "8443"
)

// TestIsolation proves the deployment shape: a sandbox whose only link is
// to egressd reaches upstreams through egressd's listeners, on egressd's
// terms, and not at all on its own.
func TestIsolation(t *testing.T) {
	topo := newTopology(t)
	for _, tool := range []string{"curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is required in the sandbox namespace: %v", tool, err)
		}
	}

	// Upstreams: the test's loopback fixtures, reachable only at
	// upstreamAddr inside the upstream namespace.
	httpUp := StartHTTP(t)
	httpsUp := StartHTTPS(t)
	dns := dnstest.Start(t)
	for _, name := range []string{"allowed.test", "denied.test", "example.com"} {
		dns.SetRR(name, name+". 60 IN A "+upstreamAddr)
	}
	expose(t, topo.upstream, "tcp", upstreamAddr+":"+upHTTPPort, httpUp.Addr)
	expose(t, topo.upstream, "tcp", upstreamAddr+":"+upHTTPSPort, httpsUp.Addr)
	expose(t, topo.upstream, "udp", upstreamAddr+":53", dns.Addr())
	expose(t, topo.upstream, "tcp", upstreamAddr+":53", dns.Addr())

	policy := WritePolicy(t, []Rule{
		{ID: "allowed-http", Hosts: []string{"allowed.test"}, Ports: []int{8080}},
		{ID: "allowed-tls", Hosts: []string{"example.com"}, Ports: []int{8443}},
	})
	startInNetns(t, topo.egressd, fmt.Sprintf(`log:
  level: debug
proxy:
  listen: %[1]s:3128
admin:
  listen: 127.0.0.1:9090
policy:
  dir: %[2]s
dns:
  upstreams: ["%[3]s:53"]
audit:
  dir: %[4]s
%[5]s`, egressdSbAddr, policy, upstreamAddr, filepath.Join(t.TempDir(), "audit"),
		InternalAllow(upstreamAddr+":"+upHTTPPort, upstreamAddr+":"+upHTTPSPort)))

	proxyURL := "http://" + egressdSbAddr + ":3128"
	viaProxy := []string{"HTTP_PROXY=" + proxyURL, "HTTPS_PROXY=" + proxyURL, "http_proxy=" + proxyURL, "https_proxy=" + proxyURL}

	t.Run("proxy", func(t *testing.T) {
		tests := []struct {
			name string
			args []string
			want string
		}{
			{name: "allowed http", args: []string{"http://allowed.test:8080/"}, want: "200"},
			{name: "denied http", args: []string{"http://denied.test:8080/"}, want: "403"},
			{name: "allowed tls tunnel", args: []string{"--cacert", httpsUp.CAFile, "https://example.com:8443/"}, want: "200"},
			{name: "denied tunnel", args: []string{"--cacert", httpsUp.CAFile, "https://denied.test:8443/"}, want: "403"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				args := append([]string{"curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}"}, tt.args...)
				out, _ := topo.runEnv(t, topo.sandbox, viaProxy, args...)
				// A refused CONNECT makes curl print the proxy's code
				// in %{http_code} only as 000; %{http_connect} has it.
				if tt.want == "403" && strings.HasPrefix(tt.args[len(tt.args)-1], "https://") {
					args = append(args[:len(args)-len(tt.args)-1], "%{http_connect}")
					args = append(args, tt.args...)
					out, _ = topo.runEnv(t, topo.sandbox, viaProxy, args...)
				}
				if got := lastLine(out); got != tt.want {
					t.Errorf("curl %q via egressd = %q; want %s", tt.args, out, tt.want)
				}
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
				out, code := topo.run(t, topo.sandbox, tt.args...)
				if code == 0 {
					t.Errorf("%q from the sandbox without the proxy succeeded: %s; want a connection failure", tt.args, out)
				}
			})
		}
		// The same upstream answers from egressd's namespace: the failure
		// above is the missing route, not a dead upstream.
		out, code := topo.run(t, topo.egressd, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "4",
			"http://"+upstreamAddr+":"+upHTTPPort+"/")
		if code != 0 || out != "200" {
			t.Errorf("curl upstream from egressd's namespace = %q (exit %d); want 200", out, code)
		}
	})
}

// startInNetns runs `egressd serve` inside ns with cfg and waits until
// `egressd health` (run in the same namespace, since the admin listener is
// loopback-only) reports ready. It is stopped with SIGTERM when the test
// ends, and its log is printed if the test failed.
func startInNetns(t *testing.T, ns, cfg string) {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "egressd.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "egressd.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, binary, "serve", "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = cleanEnv()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start egressd in %s: %v", ns, err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); logf.Close(); close(exited) }()
	t.Cleanup(func() {
		// ip netns exec execs egressd in place, so this is egressd's pid.
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("egressd log:\n%s", b)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-exited:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("egressd exited before ready: %v\n%s", waitErr, b)
		default:
		}
		out, code := (&topology{}).run(t, ns, binary, "health", "--admin", "127.0.0.1:9090")
		if code == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("egressd not ready after 20s: %s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndex(s, "\n")+1:]
}
