package ca

import (
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// openT opens a fresh authority in a temporary directory.
func openT(t *testing.T, o Options) *Authority {
	t.Helper()
	a, err := Open(filepath.Join(t.TempDir(), "ca"), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return a
}

func poolOf(t *testing.T, a *Authority, identity string) *x509.CertPool {
	t.Helper()
	r, err := a.Root(identity)
	if err != nil {
		t.Fatalf("Root(%q): %v", identity, err)
	}
	p := x509.NewCertPool()
	p.AddCert(r)
	return p
}

// TestLeafVerifiesOnlyUnderItsIdentitysRoot: identity A's root does not
// validate a leaf minted for identity B (issue 14: a sandbox's CA cannot
// impersonate hosts to another sandbox); B's root does.
func TestLeafVerifiesOnlyUnderItsIdentitysRoot(t *testing.T) {
	a := openT(t, Options{})
	poolA, poolB := poolOf(t, a, "sandbox-a"), poolOf(t, a, "sandbox-b")
	leaf, err := a.Leaf("sandbox-b", "api.github.com")
	if err != nil {
		t.Fatalf("Leaf: %v", err)
	}
	opts := func(p *x509.CertPool) x509.VerifyOptions {
		return x509.VerifyOptions{Roots: p, DNSName: "api.github.com", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	}
	if _, err := leaf.Leaf.Verify(opts(poolA)); err == nil {
		t.Errorf("leaf of sandbox-b verifies under sandbox-a's root; want an unknown authority error")
	}
	if _, err := leaf.Leaf.Verify(opts(poolB)); err != nil {
		t.Errorf("leaf of sandbox-b under sandbox-b's root: %v; want it to verify", err)
	}
	wrongName := opts(poolB)
	wrongName.DNSName = "github.com"
	if _, err := leaf.Leaf.Verify(wrongName); err == nil {
		t.Errorf("leaf for api.github.com verifies for github.com; want a name mismatch")
	}
}

// TestLeafSANIsExactlyTheHost: the only SAN is the host asked for, an IP
// literal as an IP SAN; what is no host is refused.
func TestLeafSANIsExactlyTheHost(t *testing.T) {
	a := openT(t, Options{})
	tests := []struct {
		name, host string
		dns        string
		ip         string
	}{
		{"dns name", "api.github.com", "api.github.com", ""},
		{"upper case is lowered", "API.GitHub.com", "api.github.com", ""},
		{"underscore label", "_x.example.com", "_x.example.com", ""},
		{"ipv4", "192.0.2.7", "", "192.0.2.7"},
		{"ipv6", "2001:db8::1", "", "2001:db8::1"},
		{"ipv6 non-canonical", "2001:DB8:0::1", "", "2001:db8::1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := a.Leaf("sandbox-a", tt.host)
			if err != nil {
				t.Fatalf("Leaf(%q): %v", tt.host, err)
			}
			l := c.Leaf
			if tt.dns != "" && (len(l.DNSNames) != 1 || l.DNSNames[0] != tt.dns || len(l.IPAddresses) != 0) {
				t.Errorf("Leaf(%q) SANs = %v %v; want exactly DNS %s", tt.host, l.DNSNames, l.IPAddresses, tt.dns)
			}
			if tt.ip != "" && (len(l.IPAddresses) != 1 || !l.IPAddresses[0].Equal(net.ParseIP(tt.ip)) || len(l.DNSNames) != 0) {
				t.Errorf("Leaf(%q) SANs = %v %v; want exactly IP %s", tt.host, l.DNSNames, l.IPAddresses, tt.ip)
			}
			if len(l.ExtKeyUsage) != 1 || l.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth || l.IsCA {
				t.Errorf("Leaf(%q) ExtKeyUsage = %v, IsCA %v; want serverAuth only, not a CA", tt.host, l.ExtKeyUsage, l.IsCA)
			}
			if l.SerialNumber.BitLen() < 64 || l.SerialNumber.BitLen() > 128 {
				t.Errorf("Leaf(%q) serial has %d bits; want a random 128-bit serial", tt.host, l.SerialNumber.BitLen())
			}
		})
	}
	for _, bad := range []string{"", "a/b", "a..b", ".x", "x.", "[::1]", "fe80::1%eth0", "*.example.com", "a b", "ex\x00ample.com", "1.2.3", "1.2.3.4.5",
		strings.Repeat("a", 64) + ".com", strings.Repeat("a.", 127) + "aa"} {
		if _, err := a.Leaf("sandbox-a", bad); err == nil {
			t.Errorf("Leaf(%q) = nil error; want a refusal", bad)
		}
	}
	// Hosts that differ only in spelling share one leaf.
	distinct := map[string]bool{}
	for _, tt := range tests {
		distinct[tt.dns+tt.ip] = true
	}
	if s := a.Stats(); s.Mints != uint64(len(distinct)) {
		t.Errorf("Stats().Mints = %d; want %d (one per distinct SAN; refused hosts mint nothing)", s.Mints, len(distinct))
	}
}

// TestLeafValidity: a leaf is valid for LeafTTL from its minting, backdated
// by 5 minutes, and is served from the cache until half of it has passed.
func TestLeafValidity(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	a := openT(t, Options{LeafTTL: 2 * time.Hour, Now: clock})
	first, err := a.Leaf("sandbox-a", "example.com")
	if err != nil {
		t.Fatalf("Leaf: %v", err)
	}
	if nb, na := first.Leaf.NotBefore, first.Leaf.NotAfter; !nb.Equal(now.Add(-5*time.Minute)) || !na.Equal(now.Add(2*time.Hour)) {
		t.Errorf("leaf valid %v to %v; want %v to %v", nb, na, now.Add(-5*time.Minute), now.Add(2*time.Hour))
	}
	now = now.Add(time.Hour - time.Second)
	if c, _ := a.Leaf("sandbox-a", "example.com"); c != first {
		t.Errorf("Leaf before half the TTL minted a new leaf; want the cached one")
	}
	now = now.Add(time.Second)
	if c, _ := a.Leaf("sandbox-a", "example.com"); c == first {
		t.Errorf("Leaf at half the TTL returned the cached leaf; want a new one")
	}
	if s := a.Stats(); s.Mints != 2 || s.Hits != 1 {
		t.Errorf("Stats() = %+v; want 2 mints and 1 hit", s)
	}
}

// TestLeafCacheIsBounded: the cache never holds more than CacheSize leaves,
// and drops the least recently used.
func TestLeafCacheIsBounded(t *testing.T) {
	a := openT(t, Options{CacheSize: 3})
	hosts := []string{"a.example", "b.example", "c.example", "d.example", "e.example"}
	for _, h := range hosts {
		if _, err := a.Leaf("sandbox-a", h); err != nil {
			t.Fatalf("Leaf(%q): %v", h, err)
		}
		if s := a.Stats(); s.Cached > 3 {
			t.Fatalf("after %s the cache holds %d leaves; want at most 3", h, s.Cached)
		}
	}
	a.Leaf("sandbox-a", "e.example") // the most recent: a hit
	a.Leaf("sandbox-a", "a.example") // the oldest, evicted: a mint
	if s := a.Stats(); s.Mints != 6 || s.Hits != 1 || s.Cached != 3 {
		t.Errorf("Stats() = %+v; want 6 mints, 1 hit, 3 cached", s)
	}
}

// TestLeafConcurrentFirstCallsMintOnce: many first requests for one
// (identity, host) at once sign one leaf, and all get it.
func TestLeafConcurrentFirstCallsMintOnce(t *testing.T) {
	a := openT(t, Options{})
	if _, err := a.Root("sandbox-a"); err != nil {
		t.Fatalf("Root: %v", err)
	}
	const n = 32
	start := make(chan struct{})
	got := make([]any, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			c, err := a.Leaf("sandbox-a", "example.com")
			if err != nil {
				t.Errorf("Leaf: %v", err)
			}
			got[i] = c
		}()
	}
	close(start)
	wg.Wait()
	if s := a.Stats(); s.Mints != 1 || s.Hits != n-1 {
		t.Errorf("Stats() = %+v; want 1 mint and %d hits", s, n-1)
	}
	for i := range got {
		if got[i] != got[0] {
			t.Fatalf("caller %d got a different leaf than caller 0", i)
		}
	}
}

// TestRootsPersist: a root is created once, kept as <id>.crt (0644) and
// <id>.key (0600), and the next Open uses it.
func TestRootsPersist(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	a, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	r1, err := a.Root("sandbox-a")
	if err != nil {
		t.Fatalf("Root: %v", err)
	}
	if !r1.IsCA || !r1.MaxPathLenZero || r1.MaxPathLen != 0 || len(r1.PermittedDNSDomains) != 0 {
		t.Errorf("root IsCA=%v MaxPathLen=%d zero=%v constraints=%v; want a CA with pathlen 0 and no name constraints",
			r1.IsCA, r1.MaxPathLen, r1.MaxPathLenZero, r1.PermittedDNSDomains)
	}
	for name, want := range map[string]os.FileMode{"sandbox-a.crt": 0o644, "sandbox-a.key": 0o600} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("stat %s = %v, %v; want mode %04o", name, fi, err, want)
		}
	}
	b, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("second Open: %v", err)
	}
	r2, err := b.Root("sandbox-a")
	if err != nil || !r2.Equal(r1) {
		t.Errorf("Root after reopening = %v; want the same root", err)
	}
	if s := b.Stats(); s.Roots != 0 {
		t.Errorf("second Open created %d roots; want 0 (loaded)", s.Roots)
	}
}

// TestTwoAuthoritiesShareOneRoot: two authorities on one directory (two
// processes: serve and `ca export`) racing to create an identity's root end
// up with one root, not the last writer's.
func TestTwoAuthoritiesShareOneRoot(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	var as [4]*Authority
	for i := range as {
		var err error
		if as[i], err = Open(dir, Options{}); err != nil {
			t.Fatalf("Open: %v", err)
		}
	}
	start := make(chan struct{})
	roots := make([]*x509.Certificate, len(as))
	var wg sync.WaitGroup
	for i, a := range as {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r, err := a.Root("sandbox-a")
			if err != nil {
				t.Errorf("Root: %v", err)
			}
			roots[i] = r
		}()
	}
	close(start)
	wg.Wait()
	var created uint64
	for i, a := range as {
		created += a.Stats().Roots
		if !roots[i].Equal(roots[0]) {
			t.Errorf("authority %d has a different root than authority 0", i)
		}
	}
	if created != 1 {
		t.Errorf("%d roots created; want 1", created)
	}
}

// TestLeafCacheHitDoesNotAllocate guards the path every inspected CONNECT
// after the first takes.
func TestLeafCacheHitDoesNotAllocate(t *testing.T) {
	a := openT(t, Options{})
	for _, host := range []string{"api.github.com", "192.0.2.7", "2001:db8::1"} {
		if _, err := a.Leaf("sandbox-a", host); err != nil {
			t.Fatalf("Leaf(%q): %v", host, err)
		}
		if n := testing.AllocsPerRun(100, func() { a.Leaf("sandbox-a", host) }); n != 0 {
			t.Errorf("Leaf(%q) on a cache hit allocates %v times; want 0", host, n)
		}
	}
}

// TestLeafRefusedPastRootExpiry: a root about to expire mints no leaf that
// would outlive it; the error says to rotate.
func TestLeafRefusedPastRootExpiry(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	a := openT(t, Options{Now: func() time.Time { return now }})
	root, err := a.Root("sandbox-a")
	if err != nil {
		t.Fatalf("Root: %v", err)
	}
	now = root.NotAfter.Add(-time.Hour)
	if _, err := a.Leaf("sandbox-a", "example.com"); err == nil || !strings.Contains(err.Error(), "rotate") {
		t.Errorf("Leaf an hour before the root expires (TTL 6h) = %v; want a refusal saying to rotate", err)
	}
}
