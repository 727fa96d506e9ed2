package main

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"software.sslmate.com/src/go-pkcs12"

	"github.com/egressd/egressd/proxy/ca"
)

func TestCAInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "ca")
	if code, out, errOut := runCLI("ca", "init", dir); code != 0 {
		t.Fatalf("ca init = %d (%s%s); want 0", code, out, errOut)
	}
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("ca init made %v, %v; want a 0700 directory", fi, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("ca init left %d files; want an empty directory (roots are per identity, made on use)", len(ents))
	}
	if code, _, _ := runCLI("ca", "init"); code != 2 {
		t.Errorf("ca init without DIR = %d; want 2", code)
	}
}

// TestCAExportPEM: the exported PEM is the identity's root, parsed by Go,
// and the same root serve mints its leaves from.
func TestCAExportPEM(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	code, out, errOut := runCLI("ca", "export", "--ca-dir", dir, "--identity", "sandbox-1")
	if code != 0 {
		t.Fatalf("ca export = %d (%s); want 0", code, errOut)
	}
	b, rest := pem.Decode([]byte(out))
	if b == nil || b.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("ca export printed %q; want one PEM certificate", out)
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatalf("parse exported root: %v", err)
	}
	a, err := ca.Open(dir, ca.Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	leaf, err := a.Leaf("sandbox-1", "api.github.com")
	if err != nil {
		t.Fatalf("Leaf: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "api.github.com"}); err != nil {
		t.Errorf("a leaf for sandbox-1 does not verify under its exported root: %v", err)
	}
	if strings.Contains(out, "PRIVATE KEY") {
		t.Errorf("ca export printed a private key")
	}
}

// TestCAExportPKCS12: the trust store opens with openssl and the JDK's
// default password, holds the root and no key.
func TestCAExportPKCS12(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Fatalf("openssl is needed to check the PKCS#12 export (apt-get install openssl; .ci/run does): %v", err)
	}
	tmp := t.TempDir()
	dir, p12 := filepath.Join(tmp, "ca"), filepath.Join(tmp, "sandbox-1.p12")
	if code, _, errOut := runCLI("ca", "export", "--ca-dir", dir, "--identity", "sandbox-1", "--format", "pkcs12", "--out", p12); code != 0 {
		t.Fatalf("ca export --format pkcs12 = %d (%s); want 0", code, errOut)
	}
	got, err := exec.Command(openssl, "pkcs12", "-in", p12, "-nokeys", "-passin", "pass:changeit").CombinedOutput()
	if err != nil {
		t.Fatalf("openssl pkcs12 -nokeys: %v\n%s", err, got)
	}
	_, pemOut, _ := runCLI("ca", "export", "--ca-dir", dir, "--identity", "sandbox-1")
	if !strings.Contains(string(got), strings.TrimSpace(pemOut)) {
		t.Errorf("openssl read %q from the trust store; want the PEM root %q", got, pemOut)
	}
	if keys, err := exec.Command(openssl, "pkcs12", "-in", p12, "-nocerts", "-nodes", "-passin", "pass:changeit").CombinedOutput(); err != nil || strings.Contains(string(keys), "PRIVATE KEY") {
		t.Errorf("openssl pkcs12 -nocerts = %q, %v; want no key in a trust store", keys, err)
	}
	raw, err := os.ReadFile(p12)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := pkcs12.DecodeTrustStore(raw, "changeit")
	if err != nil || len(certs) != 1 || !certs[0].IsCA {
		t.Errorf("DecodeTrustStore = %d certs, %v; want the one root", len(certs), err)
	}
}

// TestCAExportRefusals: usage errors exit 2 and say what to do.
func TestCAExportRefusals(t *testing.T) {
	tmp := t.TempDir()
	yaml := fmt.Sprintf("audit:\n  dir: %s\nidentities:\n  - id: sandbox-1\n    sources: [10.0.0.0/24]\n", filepath.Join(tmp, "audit"))
	cfg := writeConfig(t, tmp, yaml)
	noIDs := filepath.Join(tmp, "none.yaml")
	if err := os.WriteFile(noIDs, []byte(fmt.Sprintf("audit:\n  dir: %s\n", filepath.Join(tmp, "audit"))), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown identity", []string{"--config", cfg, "--identity", "sandbox-2"}, `identity "sandbox-2" is not in the identities`},
		{"anonymous with identities", []string{"--config", cfg}, `identity "anonymous" is not in the identities`},
		{"named identity without identities", []string{"--config", noIDs, "--identity", "x"}, "export --identity anonymous"},
		{"config and ca-dir", []string{"--config", cfg, "--ca-dir", tmp}, "not both"},
		{"bad format", []string{"--ca-dir", tmp, "--format", "jks"}, "--format must be pem or pkcs12"},
		{"argument", []string{"--ca-dir", tmp, "extra"}, "takes no arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := runCLI(append([]string{"ca", "export"}, tt.args...)...)
			if code != 2 || !strings.Contains(errOut, tt.want) {
				t.Errorf("ca export %v = %d, %q; want 2 and %q", tt.args, code, errOut, tt.want)
			}
		})
	}
	if ents, _ := os.ReadDir(filepath.Join(tmp, "egressd-ca")); len(ents) != 0 {
		t.Errorf("refused exports left %d files in the CA directory; want none", len(ents))
	}
	code, out, errOut := runCLI("ca", "export", "--config", cfg, "--identity", "sandbox-1")
	if code != 0 || !strings.Contains(out, "BEGIN CERTIFICATE") {
		t.Errorf("ca export of a configured identity = %d, %q; want the root", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(tmp, "egressd-ca", "sandbox-1.key")); err != nil {
		t.Errorf("export did not create the root in inspect.ca_dir (egressd-ca beside audit.dir): %v", err)
	}
}

// TestServeRefusesReadableCAKey: a root key readable by others stops
// serve at start-up, saying how to fix it (issue 14).
func TestServeRefusesReadableCAKey(t *testing.T) {
	tmp := t.TempDir()
	caDir := filepath.Join(tmp, "ca")
	a, err := ca.Open(caDir, ca.Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if _, err := a.Root("anonymous"); err != nil {
		t.Fatalf("Root: %v", err)
	}
	key := filepath.Join(caDir, "anonymous.key")
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	err = serveInspect(t, tmp, "ca_dir: "+caDir)
	if err == nil || !strings.Contains(err.Error(), "chmod 600 "+key) {
		t.Errorf("serve with a 0644 CA key = %v; want a refusal saying `chmod 600 %s`", err, key)
	}
	var ee *exitError
	if errors.As(err, &ee) && ee.code == 0 {
		t.Errorf("serve refusal exit code 0")
	}
	if _, err := os.Stat(filepath.Join(tmp, "audit")); err == nil {
		t.Errorf("serve created the audit log before refusing the CA; want the refusal first")
	}
}

// TestCAExportConfiguredRoot: an identity whose root is configured
// (identities[].ca_cert, ca_key) exports that root, the one serve mints
// from, and gets nothing created in the CA directory.
func TestCAExportConfiguredRoot(t *testing.T) {
	tmp := t.TempDir()
	// An operator's root, made here with a throwaway CA directory.
	ops, err := ca.Open(filepath.Join(tmp, "ops"), ca.Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if _, err := ops.Root("ops"); err != nil {
		t.Fatalf("Root: %v", err)
	}
	cert, key := filepath.Join(tmp, "ops", "ops.crt"), filepath.Join(tmp, "ops", "ops.key")
	yaml := fmt.Sprintf("audit:\n  dir: %s\nidentities:\n  - id: sandbox-1\n    sources: [10.0.0.0/24]\n    ca_cert: %s\n    ca_key: %s\n",
		filepath.Join(tmp, "audit"), cert, key)
	cfg := writeConfig(t, tmp, yaml)
	code, out, errOut := runCLI("ca", "export", "--config", cfg, "--identity", "sandbox-1")
	if code != 0 {
		t.Fatalf("ca export = %d (%s); want 0", code, errOut)
	}
	want, err := os.ReadFile(cert)
	if err != nil {
		t.Fatal(err)
	}
	if out != string(want) {
		t.Errorf("ca export printed %q; want the configured root %q", out, want)
	}
	if ents, _ := os.ReadDir(filepath.Join(tmp, "egressd-ca")); len(names(ents)) > 1 {
		t.Errorf("CA directory holds %v; want no root created for a configured identity", names(ents))
	}
	if err := os.Chmod(key, 0o640); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI("ca", "export", "--config", cfg, "--identity", "sandbox-1"); code == 0 || !strings.Contains(errOut, "chmod 600 "+key) {
		t.Errorf("ca export with a group-readable configured key = %d, %q; want a refusal saying chmod 600", code, errOut)
	}
}

func names(ents []os.DirEntry) []string {
	out := make([]string, len(ents))
	for i, e := range ents {
		out[i] = e.Name()
	}
	return out
}

// TestServeRefusesBadUpstreamCAFile: an inspect.upstream_ca_file without a
// certificate stops start-up instead of failing every inspected upstream.
func TestServeRefusesBadUpstreamCAFile(t *testing.T) {
	tmp := t.TempDir()
	bundle := filepath.Join(tmp, "bundle.pem")
	if err := os.WriteFile(bundle, []byte("not PEM\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := serveInspect(t, tmp, "upstream_ca_file: "+bundle)
	if err == nil || !strings.Contains(err.Error(), "inspect.upstream_ca_file") {
		t.Errorf("serve with an upstream_ca_file without PEM = %v; want a refusal naming inspect.upstream_ca_file", err)
	}
}

// serveInspect runs serve with a config in dir whose inspect section is
// the one line inspect, for tests of inspect settings serve must refuse.
// The proxy and admin listen on ports this test holds: were the setting
// accepted, serve would fail to listen instead of serving on.
func serveInspect(t *testing.T, dir, inspect string) error {
	t.Helper()
	held := make([]string, 2)
	for i := range held {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		held[i] = ln.Addr().String()
	}
	yaml := fmt.Sprintf("proxy:\n  listen: %s\nadmin:\n  listen: %s\naudit:\n  dir: %s\ninspect:\n  %s\n",
		held[0], held[1], filepath.Join(dir, "audit"), inspect)
	cfg := writeConfig(t, dir, yaml)
	return run([]string{"serve", "--config", cfg}, &bytes.Buffer{}, &bytes.Buffer{})
}
