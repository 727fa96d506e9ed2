package ca

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeRoot writes cert and key as PEM files in dir and returns their paths.
func writeRoot(t *testing.T, dir, name string, der []byte, key crypto.Signer, keyMode os.FileMode) Files {
	t.Helper()
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	f := Files{Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem")}
	if err := os.WriteFile(f.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.Key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), keyMode); err != nil {
		t.Fatal(err)
	}
	return f
}

// rsaRoot makes a self-signed RSA CA, as an operator's PKI might.
func rsaRoot(t *testing.T) ([]byte, *rsa.PrivateKey) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	sn, _ := serial()
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: "ops CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour * 365),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

// TestConfiguredRoot: an identity with a configured root gets its leaves
// from it (ECDSA or RSA), and nothing is created for it in the directory;
// other identities still get roots of their own there.
func TestConfiguredRoot(t *testing.T) {
	ext := t.TempDir()
	ecRoot, _, err := newRoot("ops", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rsaDER, rsaKey := rsaRoot(t)
	conf := map[string]Files{
		"sandbox-ec":  writeRoot(t, ext, "ec", ecRoot.cert.Raw, ecRoot.key, 0o600),
		"sandbox-rsa": writeRoot(t, ext, "rsa", rsaDER, rsaKey, 0o400),
	}
	dir := filepath.Join(t.TempDir(), "ca")
	a, err := Open(dir, Options{Configured: conf})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	for id, f := range conf {
		want, err := os.ReadFile(f.Cert)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := pem.Decode(want)
		got, err := a.Root(id)
		if err != nil || string(got.Raw) != string(b.Bytes) {
			t.Errorf("Root(%s) = %v; want the configured certificate", id, err)
		}
		leaf, err := a.Leaf(id, "api.github.com")
		if err != nil {
			t.Fatalf("Leaf(%s): %v", id, err)
		}
		if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: poolOf(t, a, id), DNSName: "api.github.com"}); err != nil {
			t.Errorf("leaf of %s under its configured root: %v", id, err)
		}
	}
	if _, err := a.Root("sandbox-other"); err != nil {
		t.Fatalf("Root(sandbox-other): %v", err)
	}
	ents, _ := os.ReadDir(dir)
	if got := names(ents); len(got) != 3 || !strings.Contains(strings.Join(got, " "), "sandbox-other.key") {
		t.Errorf("CA directory holds %v; want only .lock and sandbox-other's pair", got)
	}
}

// TestConfiguredRootRefusals: a configured root must be a self-signed CA
// whose key only egressd's user can read.
func TestConfiguredRootRefusals(t *testing.T) {
	ext := t.TempDir()
	good, _, err := newRoot("ops", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := newRoot("other", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := mintLeaf(good, "example.com", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// An intermediate: a CA, but signed by another root.
	inter, _, err := newRoot("inter", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tmpl := *inter.cert
	interDER, err := x509.CreateCertificate(rand.Reader, &tmpl, good.cert, inter.key.Public(), good.key)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		files Files
		want  string
	}{
		{"key readable by others", writeRoot(t, ext, "wide", good.cert.Raw, good.key, 0o644), "chmod 600"},
		{"not a CA", writeRoot(t, ext, "leaf", leaf.Certificate[0], leaf.PrivateKey.(crypto.Signer), 0o600), "is not a CA"},
		{"intermediate", writeRoot(t, ext, "inter", interDER, inter.key, 0o600), "self-signed"},
		{"key of another root", Files{Cert: writeRoot(t, ext, "a", good.cert.Raw, good.key, 0o600).Cert,
			Key: writeRoot(t, ext, "b", other.cert.Raw, other.key, 0o600).Key}, "does not belong"},
		{"missing key", Files{Cert: writeRoot(t, ext, "c", good.cert.Raw, good.key, 0o600).Cert, Key: filepath.Join(ext, "absent.pem")}, "has no key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(filepath.Join(t.TempDir(), "ca"), Options{Configured: map[string]Files{"sandbox-a": tt.files}})
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), `"sandbox-a"`) {
				t.Errorf("Open with %s = %v; want an error naming the identity and saying %q", tt.name, err, tt.want)
			}
		})
	}
}
