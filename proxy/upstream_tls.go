package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
)

// maxTLSTransports bounds the per-identity transports; past it the idle
// connections of every transport are closed and the table starts afresh.
// Identities come from the configuration, so a real table stays far below.
const maxTLSTransports = 4096

// maxH2Hosts bounds what one identity remembers of which upstreams speak
// h2; past it the memory starts afresh (every host is asked again).
const maxH2Hosts = 4096

// tlsTransports are the upstream transports of inspected tunnels, one set
// per identity: a pooled connection is only ever reused by the identity
// that dialled it, so no connection (and no byte an upstream left on it) is
// shared across sandboxes. Each dials only through the pinned dialer and
// verifies the upstream's certificate for the host against roots (the
// system's when nil): a failure is upstream_tls, never a retry without TLS.
type tlsTransports struct {
	cfg   Config
	dial  Dialer
	roots *x509.CertPool

	mu     sync.Mutex
	byID   map[string]*tlsUpstream
	closed bool
}

func newTLSTransports(c Config, d Dialer, roots *x509.CertPool) *tlsTransports {
	return &tlsTransports{cfg: c, dial: d, roots: roots, byID: make(map[string]*tlsUpstream)}
}

// tlsUpstream is one identity's way upstream from inspected tunnels. It
// holds the connection invariant of the inspected path: an HTTP/1.x
// connection that carried a request body is never reused, and a request
// carrying an injected secret never shares an HTTP/1.x connection with
// another request. On HTTP/1.x the upstream, not egressd, decides where a
// body ends: one that answers without reading it (many do) parses the body
// as the next request, which then runs undecided and unaudited, and a
// request sent after it on the connection (a secret-bearing one included)
// becomes part of whatever the body began. h2 frames every request itself,
// so there connections are shared freely.
//
// Which protocol a connection speaks is known only once it is open, so
// it is learnt per upstream: requests that may share a connection go on
// keep, and its responses say what the upstream speaks; a request that
// must be alone, to an upstream not known yet, is preceded by a TLS
// handshake that asks (probe, one handshake per identity and upstream).
// It then goes on h2Only to an upstream that speaks h2, else on single.
// An upstream that speaks h2 and gets both kinds of request holds two
// connections per identity, keep's and h2Only's.
type tlsUpstream struct {
	dialTLS func(ctx context.Context, addr string) (*tls.Conn, error)
	// keep pools connections (h2 or HTTP/1.1, as ALPN chooses) for
	// requests that may share one: no body, no secret.
	keep *http.Transport
	// single speaks HTTP/1.1 only, a connection per request, sent with
	// "Connection: close" (but for an upgrade). h2 with keep-alives off
	// would still hand one connection to concurrent requests, and fail
	// those it could not.
	single *http.Transport
	// h2Only speaks h2 or fails with errNotH2 before sending a byte.
	h2Only *http.Transport

	mu sync.Mutex
	h2 map[string]bool // host:port → speaks h2; absent: not known
}

// errNotH2 is an upstream remembered as speaking h2 that no longer chose
// it in ALPN; it is remembered as speaking HTTP/1.1 from then on.
var errNotH2 = errors.New("upstream no longer negotiates h2")

func (x *tlsTransports) newUpstream() *tlsUpstream {
	tlsConfig := func() *tls.Config { return &tls.Config{RootCAs: x.roots, MinVersion: tls.VersionTLS12} }
	u := &tlsUpstream{keep: newTransport(x.cfg, x.dial), single: newTransport(x.cfg, x.dial),
		h2Only: newTransport(x.cfg, x.dial), h2: make(map[string]bool)}
	u.dialTLS = func(ctx context.Context, addr string) (*tls.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		raw, err := x.dial.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		// Offering h2 alone, a server that speaks only HTTP/1.1 would
		// fail the handshake (no_application_protocol), which reads as a
		// TLS failure; offered both, it picks http/1.1.
		cfg := tlsConfig()
		cfg.ServerName, cfg.NextProtos = host, []string{"h2", "http/1.1"}
		tc := tls.Client(raw, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return tc, nil
	}
	for _, tr := range []*http.Transport{u.keep, u.h2Only} {
		tr.TLSClientConfig = tlsConfig()
		// The Transport speaks h2 with a custom dialer only when asked to.
		tr.ForceAttemptHTTP2 = true
	}
	u.single.TLSClientConfig = tlsConfig()
	u.single.DisableKeepAlives = true
	u.h2Only.DialTLSContext = func(ctx context.Context, _, addr string) (net.Conn, error) {
		tc, err := u.dialTLS(ctx, addr)
		if err != nil {
			return nil, err
		}
		if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
			tc.Close()
			u.learn(addr, false)
			return nil, fmt.Errorf("%w (chose %q)", errNotH2, p)
		}
		return tc, nil
	}
	return u
}

// roundTrip sends an inspected request. alone says it must not share an
// HTTP/1.x connection: it carries a body or an injected secret. An
// upgrade (WebSocket) is HTTP/1.1's and takes its connection with it, so
// it goes on single, whatever the upstream speaks otherwise.
func (u *tlsUpstream) roundTrip(req *http.Request, alone, upgrade bool) (*http.Response, error) {
	addr := req.URL.Host
	if upgrade {
		return u.single.RoundTrip(req)
	}
	if !alone {
		resp, err := u.keep.RoundTrip(req)
		if err == nil {
			u.learn(addr, resp.ProtoMajor == 2)
		}
		return resp, err
	}
	h2, err := u.speaksH2(req.Context(), addr)
	if err != nil {
		return nil, err
	}
	if h2 {
		resp, err := u.h2Only.RoundTrip(req)
		if !errors.Is(err, errNotH2) || req.Body != nil {
			return resp, err
		}
		// Nothing was sent and there is no body to rewind: send it as
		// to an HTTP/1.1 upstream.
	}
	return u.single.RoundTrip(req)
}

// speaksH2 says whether addr speaks h2, asking it with a TLS handshake
// (through the pinned dialer, verified as every upstream is) when that is
// not known yet.
func (u *tlsUpstream) speaksH2(ctx context.Context, addr string) (bool, error) {
	u.mu.Lock()
	h2, ok := u.h2[addr]
	u.mu.Unlock()
	if ok {
		return h2, nil
	}
	tc, err := u.dialTLS(ctx, addr)
	if err != nil {
		return false, err
	}
	h2 = tc.ConnectionState().NegotiatedProtocol == "h2"
	tc.Close()
	u.learn(addr, h2)
	return h2, nil
}

func (u *tlsUpstream) learn(addr string, h2 bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.h2[addr]; !ok && len(u.h2) >= maxH2Hosts {
		clear(u.h2)
	}
	u.h2[addr] = h2
}

func (u *tlsUpstream) closeIdle() {
	u.keep.CloseIdleConnections()
	u.single.CloseIdleConnections()
	u.h2Only.CloseIdleConnections()
}

// get returns identity's upstream, creating it on first use.
func (x *tlsTransports) get(identity string) *tlsUpstream {
	x.mu.Lock()
	defer x.mu.Unlock()
	if u, ok := x.byID[identity]; ok {
		return u
	}
	if len(x.byID) >= maxTLSTransports {
		for _, u := range x.byID {
			u.closeIdle()
		}
		clear(x.byID)
	}
	u := x.newUpstream()
	if !x.closed {
		x.byID[identity] = u
	}
	return u
}

// closeIdle closes every transport's idle connections, for a reload or
// shutdown; transports made afterwards are not kept.
func (x *tlsTransports) closeIdle() {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, u := range x.byID {
		u.closeIdle()
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
