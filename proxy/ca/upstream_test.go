package ca

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUpstreamRoots: inspect.upstream_ca_file is the pool upstream
// certificates are checked against; a file with no certificate is an error,
// not an empty pool that would fail every upstream.
func TestUpstreamRoots(t *testing.T) {
	a := openT(t, Options{})
	root, err := a.Root("upstream-ca")
	if err != nil {
		t.Fatalf("Root: %v", err)
	}
	leaf, err := a.Leaf("upstream-ca", "upstream.example")
	if err != nil {
		t.Fatalf("Leaf: %v", err)
	}
	tmp := t.TempDir()
	bundle := writePEM(t, tmp, "bundle.pem", root.Raw)
	pool, err := UpstreamRoots(bundle)
	if err != nil {
		t.Fatalf("UpstreamRoots(bundle): %v", err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "upstream.example"}); err != nil {
		t.Errorf("a certificate under the bundle's CA does not verify against UpstreamRoots(bundle): %v", err)
	}
	sys, err := UpstreamRoots("")
	if err != nil || sys == nil {
		t.Fatalf("UpstreamRoots(\"\") = %v, %v; want the system roots", sys, err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: sys, DNSName: "upstream.example"}); err == nil {
		t.Errorf("a certificate of a private CA verifies against the system roots")
	}
	empty := filepath.Join(tmp, "empty.pem")
	if err := os.WriteFile(empty, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := UpstreamRoots(empty); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("UpstreamRoots(file without PEM) = %v; want an error saying so", err)
	}
	if _, err := UpstreamRoots(filepath.Join(tmp, "absent.pem")); err == nil || !strings.Contains(err.Error(), "inspect.upstream_ca_file") {
		t.Errorf("UpstreamRoots(absent) = %v; want an error naming inspect.upstream_ca_file", err)
	}
}
