package ca

import (
	"crypto/x509"
	"fmt"
	"os"
)

// UpstreamRoots returns the pool that upstream certificates of inspected
// tunnels are verified against: the certificates of the PEM bundle file,
// or the system roots if file is empty. A file without a certificate is
// an error rather than an empty pool that would fail every upstream.
func UpstreamRoots(file string) (*x509.CertPool, error) {
	if file == "" {
		p, err := x509.SystemCertPool()
		if err != nil {
			return nil, fmt.Errorf("system roots: %w", err)
		}
		return p, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("inspect.upstream_ca_file: %w", err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("inspect.upstream_ca_file %s holds no PEM certificate; give it a PEM bundle (-----BEGIN CERTIFICATE-----)", file)
	}
	return p, nil
}
