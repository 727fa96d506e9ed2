package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"sync"
)

// maxTLSTransports bounds the per-identity transports; past it the idle
// connections of every transport are closed and the table starts afresh.
// Identities come from the configuration, so a real table stays far below.
const maxTLSTransports = 4096

// tlsTransports are the upstream transports of inspected tunnels, one per
// identity: a pooled connection is only ever reused by the identity that
// dialled it, so no connection (and no byte an upstream left on it) is
// shared across sandboxes. Each speaks h2 or HTTP/1.1 as the upstream
// chooses in ALPN (gRPC needs h2 end to end), dials only through the
// pinned dialer, and verifies the upstream's certificate for the host
// against roots (the system's when nil): a failure is upstream_tls, never
// a retry without TLS.
type tlsTransports struct {
	cfg   Config
	dial  Dialer
	roots *x509.CertPool

	mu     sync.Mutex
	byID   map[string]*http.Transport
	closed bool
}

func newTLSTransports(c Config, d Dialer, roots *x509.CertPool) *tlsTransports {
	return &tlsTransports{cfg: c, dial: d, roots: roots, byID: make(map[string]*http.Transport)}
}

// get returns identity's transport, creating it on first use.
func (x *tlsTransports) get(identity string) *http.Transport {
	x.mu.Lock()
	defer x.mu.Unlock()
	if tr, ok := x.byID[identity]; ok {
		return tr
	}
	if len(x.byID) >= maxTLSTransports {
		for _, tr := range x.byID {
			tr.CloseIdleConnections()
		}
		clear(x.byID)
	}
	tr := newTransport(x.cfg, x.dial)
	tr.TLSClientConfig = &tls.Config{RootCAs: x.roots, MinVersion: tls.VersionTLS12}
	// The Transport speaks h2 with a custom dialer only when asked to.
	tr.ForceAttemptHTTP2 = true
	if !x.closed {
		x.byID[identity] = tr
	}
	return tr
}

// closeIdle closes every transport's idle connections, for a reload or
// shutdown; transports made afterwards are not kept.
func (x *tlsTransports) closeIdle() {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, tr := range x.byID {
		tr.CloseIdleConnections()
	}
	clear(x.byID)
	x.closed = true
}

// isUpstreamTLS reports a failed TLS handshake with an upstream: a
// certificate that does not verify, an alert, or bytes that are not TLS.
func isUpstreamTLS(err error) bool {
	var cv *tls.CertificateVerificationError
	var rh tls.RecordHeaderError
	var alert tls.AlertError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	return errors.As(err, &cv) || errors.As(err, &rh) || errors.As(err, &alert) ||
		errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci)
}
