package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/dnsguard/dnstest"
	"github.com/egressd/egressd/policy"
)

// sandboxToken is the sandbox identity's proxy token, its SOCKS5 password.
const sandboxToken = "sandbox-socks-token"

// nodeFetch is Node's built-in fetch with no proxy settings (Node reads
// none for it): it prints "STATUS BODYLENGTH", or "refused CAUSE" and
// exits 3.
const nodeFetch = `fetch(process.argv[1], {signal: AbortSignal.timeout(10000)}).then(
  async r => { const b = await r.text(); console.log(r.status + " " + b.length); },
  e => { console.log("refused " + ((e.cause && (e.cause.code || e.cause.message)) || e.message)); process.exit(3); })`

// TestSandboxClientsIgnoringProxy proves issue 26's deployment: a sandbox
// whose only route is egressd, with redirect rules in egressd's namespace
// that the sandbox cannot touch. Clients that ignore HTTP_PROXY (Node's
// fetch) arrive through the transparent listener, SOCKS clients (curl, git)
// through the SOCKS5 listener; both are decided by the same rules, address
// floor and audit as the proxy, and neither opens a way to a name the
// policy refuses, to a destination the client picked itself, or to
// metadata and private addresses.
func TestSandboxClientsIgnoringProxy(t *testing.T) {
	requireTools(t, "curl", "nft", "node", "git")
	topo := newTopology(t)
	extendTopology(t, topo)
	sandboxHosts(t, topo)

	httpUp := StartHTTP(t)
	httpsUp := StartHTTPS(t) // its certificate names example.com and *.example.com
	gitUp := gitServer(t)
	dns := dnstest.Start(t)
	for name, addr := range map[string]string{
		"example.com": upstreamAddr, "api.example.com": upstreamAddr, "plain.example.com": upstreamAddr,
		"git.example.com": gitAddr, "denied.example.com": deniedAddr,
		"private.example.com": privateAddr, "metadata.example.com": metadataAddr,
	} {
		dns.SetRR(name, name+". 60 IN A "+addr)
	}
	expose(t, topo.upstream, "udp", upstreamAddr+":53", dns.Addr())
	expose(t, topo.upstream, "tcp", upstreamAddr+":53", dns.Addr())
	expose(t, topo.upstream, "tcp", upstreamAddr+":443", httpsUp.Addr)
	expose(t, topo.upstream, "tcp", upstreamAddr+":80", httpUp.Addr)
	expose(t, topo.upstream, "tcp", gitAddr+":443", gitUp.Addr)
	// Nothing may reach these; each counts what does.
	witnesses := map[string]*atomic.Int64{}
	for _, a := range []string{deniedAddr + ":443", privateAddr + ":443", metadataAddr + ":80", metadataAddr + ":443"} {
		witnesses[a] = countAccepts(t, topo.upstream, a)
	}

	caDir := filepath.Join(t.TempDir(), "ca")
	rootPEM, errOut, code := RunCLI(t, "ca", "export", "--ca-dir", caDir, "--identity", "agent")
	if code != 0 {
		t.Fatalf("ca export = %d (%s)", code, errOut)
	}
	rootFile := filepath.Join(t.TempDir(), "agent-root.pem")
	if err := os.WriteFile(rootFile, []byte(rootPEM), 0o644); err != nil {
		t.Fatal(err)
	}
	bundle := WritePolicy(t, []Rule{
		{ID: "tunnelled", Hosts: []string{"example.com"}, Ports: []int{443}},
		{ID: "inspected", Hosts: []string{"api.example.com"}, Ports: []int{443}, Inspect: true},
		// Plain HTTP arrives as a CONNECT to port 80: the rule says so.
		{ID: "plain", Hosts: []string{"plain.example.com"}, Ports: []int{80}, TLS: no()},
		{ID: "git", Hosts: []string{"git.example.com"}, Ports: []int{443}},
		// Allowed by name; the address floor still refuses what they
		// resolve to.
		{ID: "private", Hosts: []string{"private.example.com"}, Ports: []int{443}},
		{ID: "metadata", Hosts: []string{"metadata.example.com"}, Ports: []int{80}},
	})
	sum := sha256.Sum256([]byte(sandboxToken))
	// deniedAddr is let through the floor so that what refuses
	// denied.example.com is the policy, not the private range.
	eg := startInNetns(t, topo.egressd, fmt.Sprintf(`log:
  level: debug
proxy:
  listen: %[1]s:3128
  socks_listen: %[1]s:%[2]s
  transparent_listen: %[1]s:%[3]s
admin:
  listen: 127.0.0.1:9090
policy:
  dir: %[4]s
dns:
  upstreams: ["%[5]s:53"]
  listen: %[1]s:53
inspect:
  ca_dir: %[6]s
  upstream_ca_file: %[7]s
identities:
  - id: agent
    sources: [%[8]s/32]
    token_sha256: %[9]s
%[10]s`, egressdSbAddr, socksPort, transparentPort, bundle, upstreamAddr, caDir, httpsUp.CAFile,
		sandboxAddr, hex.EncodeToString(sum[:]),
		InternalAllow(upstreamAddr+":443", upstreamAddr+":80", gitAddr+":443", deniedAddr+":443")))
	installRedirect(t, topo)

	socks := egressdSbAddr + ":" + socksPort
	proxyURL := "http://" + egressdSbAddr + ":3128"
	// The sandbox's own records, by how they arrived; reason "" is any.
	waitVia := func(t *testing.T, via, host string, decision audit.Decision, reason policy.Reason, also func(audit.Record) bool) {
		t.Helper()
		eg.WaitRecords(t, fmt.Sprintf("%s %s (%s) via %s from %s", decision, host, reason, via, sandboxAddr), func(r audit.Record) bool {
			return r.Via == via && r.Host == host && r.Decision == decision && (reason == "" || r.Reason == string(reason)) &&
				strings.HasPrefix(r.Client, sandboxAddr) && (also == nil || also(r))
		})
	}

	t.Run("node fetch without proxy settings", func(t *testing.T) {
		tests := []struct {
			name, url, ca, want string
			host                string
			decision            audit.Decision
			also                func(audit.Record) bool
		}{
			{name: "tunnelled", url: "https://example.com/bytes/5", ca: httpsUp.CAFile, want: "200 5",
				host: "example.com", decision: "allow"},
			{name: "inspected", url: "https://api.example.com/bytes/7", ca: rootFile, want: "200 7",
				host: "api.example.com", decision: "allow",
				also: func(r audit.Record) bool { return r.Kind == "http" && r.Inspected && r.Path == "/bytes/7" }},
			// A plaintext tunnel to port 80, bound to its Host.
			{name: "plain http", url: "http://plain.example.com/bytes/3", want: "200 3",
				host: "plain.example.com", decision: "allow",
				also: func(r audit.Record) bool { return r.Kind == "connect" && r.Port == 80 }},
			// The sandbox's hosts file resolves it: egressd's DNS refuses it.
			{name: "denied", url: "https://denied.example.com/", ca: httpsUp.CAFile, want: "refused",
				host: "denied.example.com", decision: "deny"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				var env []string
				if tt.ca != "" {
					env = append(env, "NODE_EXTRA_CA_CERTS="+tt.ca)
				}
				out, code := nsRunEnv(t, topo.sandbox, env, "node", "-e", nodeFetch, tt.url)
				got := lastLine(out)
				if tt.want == "refused" {
					if code == 0 {
						t.Errorf("node fetch %s = %q; want refused", tt.url, out)
					}
				} else if code != 0 || got != tt.want {
					t.Errorf("node fetch %s = %q (exit %d); want %q", tt.url, out, code, tt.want)
				}
				waitVia(t, audit.ViaTransparent, tt.host, tt.decision, "", tt.also)
			})
		}
	})

	// curlStatus runs curl in the sandbox with args and returns the HTTP
	// status it printed (000 when there was no response) and its exit code.
	curlStatus := func(t *testing.T, args ...string) (string, int) {
		t.Helper()
		out, code := nsRun(t, topo.sandbox, append([]string{"curl", "-sS", "--max-time", "10",
			"-o", "/dev/null", "-w", "%{http_code}"}, args...)...)
		return lastLine(out), code
	}

	t.Run("socks", func(t *testing.T) {
		if got, code := curlStatus(t, "--socks5-hostname", socks, "--cacert", httpsUp.CAFile, "https://example.com/bytes/4"); code != 0 || got != "200" {
			t.Errorf("curl --socks5-hostname (identity by source) = %q (exit %d); want 200", got, code)
		}
		if got, code := curlStatus(t, "-x", "socks5h://agent:"+sandboxToken+"@"+socks, "--cacert", httpsUp.CAFile, "https://example.com/bytes/6"); code != 0 || got != "200" {
			t.Errorf("curl -x socks5h://agent:…@ (identity by token) = %q (exit %d); want 200", got, code)
		}
		waitVia(t, audit.ViaSOCKS, "example.com", "allow", "", nil)

		clone := filepath.Join(t.TempDir(), "clone")
		out, code := nsRunEnv(t, topo.sandbox, []string{"GIT_SSL_CAINFO=" + gitUp.CAFile, "GIT_CONFIG_NOSYSTEM=1", "HOME=" + t.TempDir()},
			"git", "-c", "http.proxy=socks5h://agent:"+sandboxToken+"@"+socks,
			"clone", "-q", "https://git.example.com/repo.git", clone)
		if code != 0 {
			t.Fatalf("git clone over SOCKS = exit %d: %s", code, out)
		}
		if b, err := os.ReadFile(filepath.Join(clone, "README")); err != nil || string(b) != "hello from git\n" {
			t.Errorf("cloned README = %q, %v; want the served commit", b, err)
		}
		waitVia(t, audit.ViaSOCKS, "git.example.com", "allow", "", nil)

		if got, code := curlStatus(t, "--socks5-hostname", socks, "--cacert", httpsUp.CAFile, "https://secret.example.com/"); code == 0 {
			t.Errorf("curl --socks5-hostname to a name no rule allows = %q (exit 0); want refused", got)
		}
		waitVia(t, audit.ViaSOCKS, "secret.example.com", "deny", policy.ReasonNoMatchingRule, nil)
	})

	t.Run("client resolves a denied name itself", func(t *testing.T) {
		// Through the redirect: the hosts file gives deniedAddr.
		if got, code := curlStatus(t, "--cacert", httpsUp.CAFile, "https://denied.example.com/"); code == 0 {
			t.Errorf("curl https://denied.example.com/ (redirected) = %q (exit 0); want refused", got)
		}
		// Over SOCKS without -hostname curl sends the address it
		// resolved: decided as the IP literal it is.
		if got, code := curlStatus(t, "--socks5", socks, "--cacert", httpsUp.CAFile, "https://denied.example.com/"); code == 0 {
			t.Errorf("curl --socks5 https://denied.example.com/ (an IP) = %q (exit 0); want refused", got)
		}
		waitVia(t, audit.ViaSOCKS, deniedAddr, "deny", "", nil)
	})

	t.Run("sni differs from the redirected destination", func(t *testing.T) {
		// An allowed name at an address egressd's DNS never gave for it.
		if got, code := curlStatus(t, "--cacert", httpsUp.CAFile, "--resolve", "example.com:443:"+deniedAddr, "https://example.com/"); code == 0 {
			t.Errorf("curl --resolve example.com:443:%s = %q (exit 0); want refused", deniedAddr, got)
		}
		waitVia(t, audit.ViaTransparent, "example.com", "deny", policy.ReasonDestinationMismatch, nil)
		// openssl says one name, the address belongs to another.
		out, code := nsRun(t, topo.sandbox, "sh", "-c", "openssl s_client -connect "+deniedAddr+":443 -servername example.com -CAfile "+httpsUp.CAFile+" </dev/null")
		if code == 0 && strings.Contains(out, "Verify return code: 0") {
			t.Errorf("openssl s_client to %s with SNI example.com completed a verified handshake:\n%s", deniedAddr, out)
		}
	})

	t.Run("metadata and private addresses on every route", func(t *testing.T) {
		routes := map[string][]string{
			"proxy":       {"-x", proxyURL},
			"socks":       {"--socks5-hostname", socks},
			"transparent": nil,
		}
		targets := []string{
			"http://" + metadataAddr + "/latest/meta-data/",
			"https://" + metadataAddr + "/",
			"http://metadata.example.com/latest/meta-data/",
			"https://" + privateAddr + "/",
			"https://private.example.com/",
			"http://127.0.0.1:9090/readyz", // egressd's own admin listener
		}
		for route, args := range routes {
			for _, target := range targets {
				if route == "transparent" && strings.HasPrefix(target, "http://127.0.0.1") {
					continue // the sandbox's own loopback: never redirected, nothing listens
				}
				t.Run(route+" "+target, func(t *testing.T) {
					got, code := curlStatus(t, append(append([]string{"-k"}, args...), target)...)
					if code == 0 && strings.HasPrefix(got, "2") {
						t.Errorf("curl %s via %s = %s; want refused", target, route, got)
					}
				})
			}
		}
		// The address floor said why, on each route; a TLS connection to
		// the bare address through the redirect carries no name at all.
		for _, via := range []string{audit.ViaProxy, audit.ViaSOCKS, audit.ViaTransparent} {
			waitVia(t, via, metadataAddr, "deny", policy.ReasonMetadataAddress, nil)
		}
		waitVia(t, audit.ViaSOCKS, privateAddr, "deny", policy.ReasonPrivateAddress, nil)
		waitVia(t, audit.ViaSOCKS, "127.0.0.1", "deny", policy.ReasonLoopbackAddress, nil)
	})

	t.Run("the sandbox cannot remove the redirect", func(t *testing.T) {
		// Even root in the sandbox flushes only its own namespace's rules.
		nsMustRun(t, topo.sandbox, "nft", "flush", "ruleset")
		out, code := nsRunEnv(t, topo.sandbox, []string{"NODE_EXTRA_CA_CERTS=" + httpsUp.CAFile}, "node", "-e", nodeFetch, "https://example.com/bytes/2")
		if code != 0 || lastLine(out) != "200 2" {
			t.Errorf("node fetch after the sandbox flushed its ruleset = %q (exit %d); want 200 2", out, code)
		}
		if out, code := nsRun(t, topo.sandbox, "curl", "-sS", "--connect-timeout", "2", "--max-time", "4", "http://"+upstreamAddr+":8080/"); code == 0 {
			t.Errorf("curl to an unredirected port succeeded: %s; want no route", out)
		}
	})

	for addr, n := range witnesses {
		if got := n.Load(); got != 0 {
			t.Errorf("%d connections reached %s; want 0 (nothing may)", got, addr)
		}
	}
	VerifyAudit(t, eg)
}
