package deploy

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TestComposeSandboxRedirect (issue 26): clients that ignore HTTP_PROXY
// still reach only egressd. The redirect rules live in the sandbox's
// network namespace, put there by a one-shot step that alone holds
// NET_ADMIN, before the sandbox (which holds no capability) starts; they
// DNAT ports 80 and 443 to egressd's transparent listener; the sandbox's
// SOCKS variable names egressd's SOCKS listener with socks5h.
func TestComposeSandboxRedirect(t *testing.T) {
	c := loadCompose(t)
	egressdIP := c.Services["egressd"].Networks["sandbox"].IPv4Address
	cfg := parseConfigFile(t, "compose/egressd.yaml")
	socks, transparent := cfg.Proxy.SOCKSListen, cfg.Proxy.TransparentListen
	if !strings.HasPrefix(socks, egressdIP+":") || !strings.HasPrefix(transparent, egressdIP+":") {
		t.Fatalf("proxy.socks_listen %q, transparent_listen %q; want both on egressd's sandbox-network address %s", socks, transparent, egressdIP)
	}

	sb, redirect := c.Services["sandbox"], c.Services["sandbox-redirect"]
	for name, s := range map[string]composeService{"sandbox": sb, "sandbox-redirect": redirect} {
		if s.NetworkMode != "service:sandbox-net" || len(s.Networks) != 0 || len(s.DNS) != 0 {
			t.Errorf("%s network_mode %q networks %v dns %q; want service:sandbox-net only (one namespace)", name, s.NetworkMode, s.Networks, s.DNS)
		}
	}
	if dep := sb.DependsOn["sandbox-redirect"].Condition; dep != "service_completed_successfully" {
		t.Errorf("sandbox depends_on sandbox-redirect = %q; want service_completed_successfully (no start without the rules)", dep)
	}
	// NET_ADMIN in the sandbox's namespace belongs to the redirect step
	// alone: a sandbox that held it could delete the rules.
	for name, s := range c.Services {
		want := []string(nil)
		if name == "sandbox-redirect" {
			want = []string{"NET_ADMIN"}
		}
		if !slices.Equal(s.CapAdd, want) {
			t.Errorf("service %s cap_add = %q; want %q", name, s.CapAdd, want)
		}
	}
	for _, name := range []string{"sandbox", "sandbox-net", "sandbox-redirect"} {
		if s := c.Services[name]; !slices.Equal(s.CapDrop, []string{"ALL"}) {
			t.Errorf("service %s cap_drop = %q; want ALL", name, s.CapDrop)
		}
	}

	script := strings.Join(redirect.Command, " ")
	if !strings.Contains(script, "ip route replace default via "+egressdIP) {
		t.Errorf("sandbox-redirect command %q; want the default route via egressd %s", script, egressdIP)
	}
	mounts := composeMounts(t, "sandbox-redirect", redirect)
	nftPath := script[strings.LastIndex(script, "nft -f ")+len("nft -f "):]
	m, ok := mounts[nftPath]
	if !ok || !m.ro {
		t.Fatalf("sandbox-redirect loads %q, mounted as %+v; want a read-only mount", nftPath, m)
	}
	rules, err := os.ReadFile(m.source)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"type nat hook output", "tcp dport { 80, 443 } dnat to " + transparent, egressdIP + " }"} {
		if !strings.Contains(string(rules), want) {
			t.Errorf("%s lacks %q:\n%s", m.source, want, rules)
		}
	}

	for _, v := range []string{"ALL_PROXY", "all_proxy"} {
		if got, want := sb.Environment[v], "socks5h://"+socks; got != want {
			t.Errorf("sandbox %s = %q; want %q (socks5h: egressd resolves)", v, got, want)
		}
	}
}
