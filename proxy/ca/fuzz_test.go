package ca

import (
	"net/netip"
	"strings"
	"testing"
)

// FuzzCanonicalHost: canonicalHost reads the CONNECT host a sandbox sent.
// Whatever it accepts is its own canonical form, holds no byte that could
// name a path or end a string early, and is a name Go's verifier matches
// against the leaf minted for it (the witness: crypto/x509).
func FuzzCanonicalHost(f *testing.F) {
	for _, s := range []string{"api.github.com", "API.GitHub.com", "192.0.2.7", "2001:DB8::1", "::ffff:10.0.0.1",
		"fe80::1%eth0", "[::1]", "a/b", "..", "1.2.3", "_x.example", "xn--bcher-kva.example", "a-.b", ""} {
		f.Add(s)
	}
	a, err := Open(f.TempDir(), Options{CacheSize: 16})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, host string) {
		got, err := canonicalHost(host)
		if err != nil {
			return
		}
		if again, err := canonicalHost(got); err != nil || again != got {
			t.Fatalf("canonicalHost(%q) = %q, but canonicalHost(%q) = %q, %v; want it unchanged", host, got, got, again, err)
		}
		if strings.ContainsAny(got, "/\\\x00 %[]") || len(got) > 253 {
			t.Fatalf("canonicalHost(%q) = %q; want no path, NUL, space, zone or bracket, at most 253 bytes", host, got)
		}
		if ip, err := netip.ParseAddr(got); err == nil && ip.String() != got {
			t.Fatalf("canonicalHost(%q) = %q; want the canonical IP form %q", host, got, ip)
		}
		leaf, err := a.Leaf("sandbox-a", host)
		if err != nil {
			t.Fatalf("Leaf(%q) after canonicalHost accepted it: %v", host, err)
		}
		if err := leaf.Leaf.VerifyHostname(got); err != nil {
			t.Fatalf("leaf for %q does not match %q: %v", host, got, err)
		}
	})
}
