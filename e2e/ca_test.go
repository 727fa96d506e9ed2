package e2e

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/dnsguard/dnstest"
)

// TestCADirectoryCreatedAtStart: serve creates the CA directory (0700)
// beside the audit directory on first start and logs where it is (issue
// 14: the embedded defaults need no `ca init`).
func TestCADirectoryCreatedAtStart(t *testing.T) {
	e := Start(t, Options{DNS: dnstest.Start(t).Addr()})
	dir := filepath.Join(filepath.Dir(e.AuditDir), "egressd-ca")
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("CA directory %s = %v, %v; want a 0700 directory made at start", dir, fi, err)
	}
	if log := e.Log(); !strings.Contains(log, "HTTPS inspection CA directory") || !strings.Contains(log, dir) {
		t.Errorf("log does not say where the CA directory is (%s):\n%s", dir, log)
	}
	m := e.Metrics(t)
	for _, name := range []string{"egressd_inspect_leaves_minted_total 0\n", "egressd_inspect_leaf_cache_hits_total 0\n",
		"egressd_inspect_leaf_cache_entries 0\n", "egressd_inspect_roots_created_total 0\n"} {
		if !strings.Contains(m, name) {
			t.Errorf("metrics lack %q", name)
		}
	}
}

// TestCAKeyReadableByOthersRefusesStart: a root key readable by others
// stops `egressd serve` with exit 2 and the chmod that fixes it.
func TestCAKeyReadableByOthersRefusesStart(t *testing.T) {
	caDir := filepath.Join(t.TempDir(), "ca")
	if _, errOut, code := RunCLI(t, "ca", "export", "--ca-dir", caDir); code != 0 {
		t.Fatalf("ca export = %d (%s); want 0", code, errOut)
	}
	key := filepath.Join(caDir, "anonymous.key")
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	e := Start(t, Options{YAML: "inspect:\n  ca_dir: " + caDir + "\n", NotReady: true})
	err := e.Wait(30 * time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("serve with a 0644 CA key: %v; want exit 2", err)
	}
	if log := e.Log(); !strings.Contains(log, "chmod 600 "+key) {
		t.Errorf("serve's refusal does not say `chmod 600 %s`:\n%s", key, log)
	}
}

// TestCAExportFormats: `egressd ca export` output parses: PEM with Go,
// PKCS#12 with openssl and the documented password; both hold the same root.
func TestCAExportFormats(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Fatalf("openssl is needed (apt-get install openssl; .ci/run does): %v", err)
	}
	tmp := t.TempDir()
	caDir := filepath.Join(tmp, "ca")
	if out, errOut, code := RunCLI(t, "ca", "init", caDir); code != 0 {
		t.Fatalf("ca init = %d (%s%s); want 0", code, out, errOut)
	}
	out, errOut, code := RunCLI(t, "ca", "export", "--ca-dir", caDir, "--identity", "sandbox-1")
	if code != 0 {
		t.Fatalf("ca export = %d (%s); want 0", code, errOut)
	}
	b, _ := pem.Decode([]byte(out))
	if b == nil {
		t.Fatalf("ca export printed %q; want PEM", out)
	}
	root, err := x509.ParseCertificate(b.Bytes)
	if err != nil || !root.IsCA {
		t.Fatalf("exported root: %v, CA %v; want a CA certificate", err, root != nil && root.IsCA)
	}
	p12 := filepath.Join(tmp, "sandbox-1.p12")
	if _, errOut, code := RunCLI(t, "ca", "export", "--ca-dir", caDir, "--identity", "sandbox-1", "--format", "pkcs12", "--out", p12); code != 0 {
		t.Fatalf("ca export --format pkcs12 = %d (%s); want 0", code, errOut)
	}
	got, err := exec.Command(openssl, "pkcs12", "-in", p12, "-nokeys", "-passin", "pass:changeit").CombinedOutput()
	if err != nil || !strings.Contains(string(got), strings.TrimSpace(out)) {
		t.Errorf("openssl pkcs12 -nokeys = %v\n%s\nwant the exported PEM root", err, got)
	}
}

// exportedRoots runs `egressd ca export --ca-dir caDir args...` and returns
// the exported root as a pool a client trusts.
func exportedRoots(t *testing.T, caDir string, args ...string) *x509.CertPool {
	t.Helper()
	rootPEM, errOut, code := RunCLI(t, append([]string{"ca", "export", "--ca-dir", caDir}, args...)...)
	if code != 0 {
		t.Fatalf("ca export = %d (%s)", code, errOut)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(rootPEM)) {
		t.Fatal("exported root does not parse")
	}
	return roots
}
