package proxy

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"
)

// TestClientHandshakeDetail is issue 25 item 5: a client that does not
// trust the leaf is audited as such, naming the command that exports the
// root it should trust; other handshake failures keep their own text.
func TestClientHandshakeDetail(t *testing.T) {
	const hint = "the client rejected egressd's certificate"
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"TLS 1.3 alert in the clear", errors.New("local error: tls: bad record MAC"), hint},
		{"bad certificate", errors.New("remote error: tls: bad certificate"), hint},
		{"unknown authority", errors.New("remote error: tls: unknown certificate authority"), hint},
		{"certificate unknown", errors.New("remote error: tls: certificate unknown"), hint},
		{"real handshake", rejectedHandshake(t), hint},
		{"not TLS", errors.New("tls: first record does not look like a TLS handshake"), "client TLS handshake: tls: first record"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := clientHandshakeDetail(tt.err, "sandbox-1")
			if !strings.Contains(got, tt.want) || (tt.want == hint) != strings.Contains(got, "`egressd ca export --identity sandbox-1`") {
				t.Errorf("clientHandshakeDetail(%q) = %q; want it to contain %q", tt.err, got, tt.want)
			}
		})
	}
}

// rejectedHandshake is the error a TLS server gets from a client that does
// not trust its self-signed certificate.
func rejectedHandshake(t *testing.T) error {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "example.com"},
		DNSNames: []string{"example.com"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	client := tls.Client(c, &tls.Config{ServerName: "example.com", RootCAs: x509.NewCertPool()})
	done := make(chan error, 1)
	go func() { done <- client.Handshake() }()
	srv := tls.Server(s, &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	err = srv.Handshake()
	c.Close()
	if cerr := <-done; cerr == nil {
		t.Fatal("client trusted an unknown root")
	}
	if err == nil {
		t.Fatal("server handshake succeeded with a client that rejected it")
	}
	return err
}
