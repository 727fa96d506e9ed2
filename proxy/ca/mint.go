package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/egressd/egressd/internal/hostname"
)

const (
	// skew backdates NotBefore so that a sandbox whose clock runs a little
	// behind egressd's accepts a certificate minted this second.
	skew = 5 * time.Minute
	// rootValidity is how long a created root is valid. Rotation is
	// deleting the identity's files (README, HTTPS inspection).
	rootValidity = 10 * 365 * 24 * time.Hour
	// maxCN is the upper bound RFC 5280 sets on a commonName.
	maxCN = 64
)

// root is one identity's CA. Created roots have P-256 keys; a configured
// one may have any key x509 can sign with.
type root struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// serial returns a random positive 128-bit serial number.
func serial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, fmt.Errorf("serial number: %w", err)
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}

// newRoot creates a self-signed P-256 root for identity: CA:true with path
// length 0 (it signs leaves only), no name constraints (a sandbox may be
// allowed any host, and the root is the sandbox's alone).
func newRoot(identity string, now time.Time) (*root, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate CA key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject: pkix.Name{
			Organization: []string{"egressd"},
			CommonName:   truncate("egressd CA for "+identity, maxCN),
		},
		NotBefore:             now.Add(-skew),
		NotAfter:              now.Add(rootValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	return &root{cert: cert, key: key}, der, nil
}

// truncate cuts s to at most n bytes at a UTF-8 boundary: a hostile
// identity name must not make an invalid or oversized subject.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// mintLeaf signs a leaf for host (canonical, see canonicalHost) with r: a
// fresh P-256 key, a random serial, valid from now-skew to now+ttl, for
// serverAuth only, with exactly host as its subject alternative name.
func mintLeaf(r *root, host string, now time.Time, ttl time.Duration) (*tls.Certificate, error) {
	// A leaf outliving its root fails every client's check; say why here
	// instead.
	if now.Add(ttl).After(r.cert.NotAfter) {
		return nil, fmt.Errorf("CA root %q expires %s, before a leaf minted now would: rotate it "+
			"(delete its .crt and .key, restart, give the sandbox the new root)", r.cert.Subject.CommonName, r.cert.NotAfter.Format(time.RFC3339))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate leaf key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		// The host as commonName too, for the few old clients that still
		// read it; verifiers match the SAN.
		Subject:               pkix.Name{CommonName: host},
		NotBefore:             now.Add(-skew),
		NotAfter:              now.Add(ttl),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = []net.IP{ip.AsSlice()}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, r.cert, &key.PublicKey, r.key)
	if err != nil {
		return nil, fmt.Errorf("sign leaf for %q: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse leaf for %q: %w", host, err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// errHost is the one error for a host a leaf cannot be minted for.
var errHost = errors.New("not a DNS name or IP address")

// canonicalHost returns host as a leaf's SAN: an IP literal (no brackets,
// no zone) in its canonical form, or a DNS name of letters, digits, '-'
// and '_' labels, lower-cased. A name of digits and dots only must be an
// IPv4 address. It allocates only when host needs changing or is refused:
// this is on the cache-hit path.
func canonicalHost(host string) (string, error) {
	if strings.IndexByte(host, ':') >= 0 || strings.Trim(host, "0123456789.") == "" && host != "" {
		ip, err := netip.ParseAddr(host)
		if err != nil || ip.Zone() != "" {
			return "", fmt.Errorf("host %q: %w", host, errHost)
		}
		var buf [64]byte
		if b := ip.AppendTo(buf[:0]); string(b) != host {
			return string(b), nil
		}
		return host, nil
	}
	n, fault := hostname.Normalize(host)
	switch fault {
	case hostname.OK:
		return n, nil
	case hostname.EmptyLabel:
		return "", fmt.Errorf("host %q: %w (empty label)", host, errHost)
	case hostname.LabelTooLong:
		return "", fmt.Errorf("host %q: %w (label longer than 63)", host, errHost)
	default:
		return "", fmt.Errorf("host %q: %w", host, errHost)
	}
}
