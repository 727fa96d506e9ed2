package pggate

import (
	"crypto/x509"
	"encoding/pem"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/egressd/egressd/proxy/ca"
)

// writeServerCert writes a leaf for localhost that proxy/ca minted (its
// root is nobody's trust anchor: sslmode=require does not verify).
func writeServerCert(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	a, err := ca.Open(t.TempDir(), ca.Options{})
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := a.Leaf("pggate-test", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	der := leaf.Certificate[0]
	kder, err := x509.MarshalPKCS8PrivateKey(leaf.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestTLSWhenConfigured(t *testing.T) {
	cert, key := writeServerCert(t)
	f := startGate(t, sharedPG(t), func(c *Config) { c.TLSCert, c.TLSKey = cert, key })
	dsn := f.dsn("agent-ro", passRO, "app")
	c := connect(t, dsn[:len(dsn)-len("sslmode=disable")]+"sslmode=require")
	if got := rows(t, c, "SELECT name FROM users WHERE id = 1"); got[0][0] != "ada" {
		t.Fatalf("query over TLS = %v", got)
	}
}

func TestSSLAndGSSENCRequestsRefusedWithoutCert(t *testing.T) {
	f := startGate(t, sharedPG(t), nil)
	c := dialSend(t, f, []byte{0, 0, 0, 8, 4, 210, 22, 48}) // GSSENCRequest
	c.SetDeadline(time.Now().Add(10 * time.Second))
	one := make([]byte, 1)
	if _, err := io.ReadFull(c, one); err != nil || one[0] != 'N' {
		t.Fatalf("GSSENCRequest answer = %q, %v; want N", one, err)
	}
	c.Write([]byte{0, 0, 0, 8, 4, 210, 22, 47}) // SSLRequest
	if _, err := io.ReadFull(c, one); err != nil || one[0] != 'N' {
		t.Fatalf("SSLRequest answer = %q, %v; want N", one, err)
	}
	// The client may go on in plaintext: the gate asks for SCRAM.
	c.Write([]byte{0, 0, 0, 23, 0, 3, 0, 0, 'u', 's', 'e', 'r', 0, 'a', 'g', 'e', 'n', 't', '-', 'r', 'o', 0, 0})
	if _, err := io.ReadFull(c, one); err != nil || one[0] != 'R' {
		t.Fatalf("answer to startup = %q, %v; want an Authentication request", one, err)
	}
}
