package e2e

import (
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// The sandbox test's world beyond TestIsolation's topology: more upstream
// addresses, the redirect rules, a git server and witnesses that count
// what reached an address nothing may reach.

// Addresses inside the upstream namespace besides upstreamAddr. egressd's
// namespace routes them to the upstream; the sandbox's only route is still
// egressd, which does not forward.
const (
	gitAddr      = "10.250.1.3"      // git.example.com: git-http-backend over TLS
	deniedAddr   = "10.250.1.9"      // denied.example.com: no rule names it
	privateAddr  = "10.250.1.20"     // private.example.com: allowed by a rule, refused by the floor
	metadataAddr = "169.254.169.254" // the cloud metadata address
)

// transparentPort is proxy.transparent_listen's port on egressdSbAddr, and
// socksPort proxy.socks_listen's.
const (
	transparentPort = "15001"
	socksPort       = "1080"
)

// redirectRules is the nftables ruleset the test installs in egressd's
// namespace, the position of a node or CNI plugin: the sandbox's TCP to
// ports 80 and 443, whatever the address, goes to the transparent
// listener. REDIRECT in egressd's own namespace is what lets the listener
// read the original destination with SO_ORIGINAL_DST.
const redirectRules = `table ip egressd_e2e {
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		iifname "eg-sb" tcp dport { 80, 443 } redirect to :` + transparentPort + `
	}
}
`

// requireTools fails the test, never skips it, when a client or tool the
// sandbox test drives is missing (.ci/run installs them).
func requireTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is required by the sandbox test (.ci/run installs it): %v", tool, err)
		}
	}
}

// extendTopology adds the upstream addresses above on the upstream's
// loopback and routes them from egressd's namespace only.
func extendTopology(t *testing.T, topo *topology) {
	t.Helper()
	for _, a := range []string{gitAddr, deniedAddr, privateAddr, metadataAddr} {
		ipCmd(t, "-n", topo.upstream, "addr", "add", a+"/32", "dev", "lo")
		ipCmd(t, "-n", topo.egressd, "route", "add", a+"/32", "via", upstreamAddr)
	}
}

// installRedirect loads redirectRules into egressd's namespace.
func installRedirect(t *testing.T, topo *topology) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "redirect.nft")
	if err := os.WriteFile(f, []byte(redirectRules), 0o644); err != nil {
		t.Fatal(err)
	}
	nsMustRun(t, topo.egressd, "nft", "-f", f)
	if out := nsMustRun(t, topo.egressd, "nft", "list", "table", "ip", "egressd_e2e"); !strings.Contains(out, "redirect to :"+transparentPort) {
		t.Fatalf("nft list table ip egressd_e2e =\n%s\nwant the redirect to :%s", out, transparentPort)
	}
}

// sandboxHosts makes the sandbox resolve denied.example.com itself, to
// deniedAddr, as a client that ignores egressd's resolver would: `ip netns
// exec` bind-mounts /etc/netns/<ns>/hosts over /etc/hosts. newTopology
// removes the directory.
func sandboxHosts(t *testing.T, topo *topology) {
	t.Helper()
	hosts := "127.0.0.1 localhost\n" + deniedAddr + " denied.example.com\n"
	if err := os.WriteFile(filepath.Join("/etc/netns", topo.sandbox, "hosts"), []byte(hosts), 0o644); err != nil {
		t.Fatal(err)
	}
}

// countAccepts listens at addr inside ns and counts the connections that reach
// it; it answers none of them.
func countAccepts(t *testing.T, ns, addr string) *atomic.Int64 {
	t.Helper()
	var ln net.Listener
	if err := inNetns(ns, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatalf("listen %s in %s: %v", addr, ns, err)
	}
	var n atomic.Int64
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return &n
}

// gitServer serves a bare repository holding one commit (file README,
// content "hello from git\n") over HTTPS with git's own smart-HTTP server,
// git-http-backend, through net/http/cgi. The repository is at
// /repo.git on the returned upstream.
func gitServer(t *testing.T) *Upstream {
	t.Helper()
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=e2e", "-c", "user.email=e2e@example.com",
			"-c", "init.defaultBranch=main"}, args...)...)
		cmd.Env = append(cleanEnv(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %q: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	src := filepath.Join(dir, "src")
	git("init", "-q", src)
	if err := os.WriteFile(filepath.Join(src, "README"), []byte("hello from git\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("-C", src, "add", "README")
	git("-C", src, "commit", "-q", "-m", "first")
	root := filepath.Join(dir, "srv")
	git("clone", "-q", "--bare", src, filepath.Join(root, "repo.git"))
	backend := filepath.Join(git("--exec-path"), "git-http-backend")
	h := &cgi.Handler{
		Path: backend,
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "HOME=" + dir},
	}
	return StartTLSHandler(t, http.Handler(h), false)
}
