package ca

import (
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// writePEM writes a certificate to a PEM file in dir.
func writePEM(t *testing.T, dir, name string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLeavesPassStrictVerifiers: a sandbox's TLS stack accepts the leaves
// under its root with the strictest settings in common use: OpenSSL's
// -x509_strict for TLS servers, and Python's ssl with VERIFY_X509_STRICT
// (the default from Python 3.13), which refuses, among others, leaves
// without an authority key identifier and CAs without key usage.
func TestLeavesPassStrictVerifiers(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Fatalf("openssl is needed (apt-get install openssl; .ci/run does): %v", err)
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is needed (apt-get install python3; .ci/run does): %v", err)
	}
	a := openT(t, Options{})
	root, err := a.Root("sandbox-a")
	if err != nil {
		t.Fatalf("Root: %v", err)
	}
	tmp := t.TempDir()
	rootPEM := writePEM(t, tmp, "root.pem", root.Raw)
	for _, host := range []string{"localhost", "127.0.0.1"} {
		t.Run(host, func(t *testing.T) {
			leaf, err := a.Leaf("sandbox-a", host)
			if err != nil {
				t.Fatalf("Leaf: %v", err)
			}
			leafPEM := writePEM(t, tmp, host+".pem", leaf.Certificate[0])
			out, err := exec.Command(openssl, "verify", "-x509_strict", "-purpose", "sslserver",
				"-CAfile", rootPEM, leafPEM).CombinedOutput()
			if err != nil || !strings.Contains(string(out), ": OK") {
				t.Errorf("openssl verify -x509_strict: %v\n%s", err, out)
			}

			ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{*leaf}})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				c.Write([]byte("ok"))
			}()
			_, port, _ := net.SplitHostPort(ln.Addr().String())
			script := fmt.Sprintf(`
import socket, ssl
ctx = ssl.create_default_context(cafile=%q)
ctx.verify_flags |= ssl.VERIFY_X509_STRICT
with socket.create_connection(("127.0.0.1", %s), timeout=10) as s:
    with ctx.wrap_socket(s, server_hostname=%q) as t:
        print(t.recv(2).decode())
`, rootPEM, port, host)
			out, err = exec.Command(python, "-c", script).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "ok" {
				t.Errorf("python ssl with VERIFY_X509_STRICT: %v\n%s", err, out)
			}
		})
	}
}
