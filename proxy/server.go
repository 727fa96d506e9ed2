package proxy

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elazarl/goproxy"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/fdlimit"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/broker"
	"github.com/egressd/egressd/proxy/budget"
	"github.com/egressd/egressd/proxy/secretpat"
)

// Dialer is what the proxy needs of *dnsguard.Dialer: resolve once, check
// every answer against the floor, dial only a vetted address.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Options are the proxy's collaborators.
type Options struct {
	Config  Config
	Decider policy.Decider
	// Floor is the address check for IP-literal destinations
	// (*dnsguard.Floor); a reload keeps it, since it is updated in place.
	Floor      policy.Floor
	Identities *identity.Store
	Dialer     Dialer
	Audit      audit.Appender
	Metrics    *Metrics
	Log        *zap.Logger
	// FDs refuses new clients while file descriptors are short. If nil,
	// only max_conns limits them.
	FDs *fdlimit.Budget
	// Secrets are the values credential actions add; a reload keeps the
	// store, which serve updates in place. If nil, no secret is loaded and
	// every request a credential rule allows is refused
	// credential_unresolved.
	Secrets *broker.Store
	// Leaves mints the certificates inspected tunnels are terminated with
	// (*ca.Authority). If nil, a CONNECT a rule asks to inspect is refused
	// inspect_unavailable, never opened as an opaque tunnel.
	Leaves LeafSource
	// UpstreamRoots verify the upstream certificates of inspected
	// tunnels (inspect.upstream_ca_file). If nil, the system roots do.
	UpstreamRoots *x509.CertPool
	// ArgsKey keys the digests of MCP tool arguments in records
	// (audit.LocalKey). If nil, records carry no digest.
	ArgsKey []byte
	// Budgets counts each identity's tokens and bytes against the rules'
	// and identities' budgets. If nil, a rule with a budget refuses every
	// request it would count (token_budget_exceeded): never uncounted.
	Budgets *budget.Ledger
	// Given is what egressd's DNS server gave each client
	// (*dnsguard.Given): a transparent connection's original destination
	// must be an address given to its client for the name it carries. If
	// nil, only connections to an Own address pass.
	Given GivenAddrs
	// Own are egressd's own addresses a transparent connection may be
	// addressed to (dns.steer_to, the transparent listener's): there the
	// name alone decides.
	Own []netip.Addr
	// SecretPatterns are the credential shapes looked for in requests
	// (secretpat.MustDefaults()); a finding is recorded, and refuses where
	// the rule or identity says so. If nil, none is looked for.
	SecretPatterns *secretpat.Set
	// parkAfter is how long an opaque tunnel's direction waits for bytes
	// before it parks (tunnelrun.go). If zero, defaultParkAfter is used;
	// tests shorten it.
	parkAfter time.Duration
	// copyBuf is the size of a tunnel's copy buffer when
	// Config.TunnelCopy is "buffer". If zero, 256 KiB is used; benchmarks
	// vary it.
	copyBuf int
}

// state is what a reload replaces as a whole; requests read it once. The
// upstream connections belong to it too: a pooled connection was vetted by
// the address floor when it was dialled, and a reload may have narrowed
// `internal:`, so after a reload every request dials afresh.
type state struct {
	decider *policy.PreDial
	ids     *identity.Store
	// tr sends plain-HTTP requests with a body; up the others.
	tr *http.Transport
	up *upstreamPool
	// tlsUp sends the requests of inspected tunnels, one transport per
	// identity.
	tlsUp *tlsTransports
}

// Server is the proxy listener.
type Server struct {
	cfg     Config
	log     *zap.Logger
	audit   audit.Appender
	metrics *Metrics
	dialer  Dialer
	floor   policy.Floor
	fds     *fdlimit.Budget
	secrets *broker.Store
	argsKey []byte
	budgets *budget.Ledger
	// sse are the open streams of MCP's HTTP+SSE transport.
	sse     sseSessions
	leaves  LeafSource
	roots   *x509.CertPool
	limits  *limiter
	sources *sourceLimiter
	failLog *audit.FailLog
	// innerLog is the error log of inspected tunnels' HTTP servers.
	innerLog *log.Logger
	// patterns are the secret patterns looked for in requests; nil none.
	patterns *secretpat.Set
	// given, own and origDst are the transparent listener's: what the
	// DNS server gave, egressd's own addresses, and where a connection
	// was going (originalDst; tests replace it).
	given   GivenAddrs
	own     []netip.Addr
	origDst func(*net.TCPConn) (netip.AddrPort, error)
	state   atomic.Pointer[state]
	srv     *http.Server
	gp      *goproxy.ProxyHttpServer

	conns    atomic.Int64
	reqID    atomic.Uint64
	idPrefix string

	tunnelsMu sync.Mutex
	tunnels   map[*tunnel]struct{}
	parkAfter time.Duration
	// copyBufs pool the copy buffers of tunnels (Config.TunnelCopy
	// "buffer"); nil when they splice.
	copyBufs  *sync.Pool
	tunnelsWG sync.WaitGroup
	// rawListeners are the SOCKS5 and transparent listeners (serveRaw),
	// closed by Shutdown; under tunnelsMu.
	rawListeners []net.Listener
	draining     atomic.Bool
	// cut is set when a drain reaches its deadline: what it ends from then
	// on is recorded shutting_down, not client_closed.
	cut atomic.Bool
	// serving counts the client connections net/http serves (until they
	// close or are hijacked), for a drain past its deadline to wait for
	// their records.
	serving connCount
}

// New builds the proxy; Serve starts it.
func New(o Options) (*Server, error) {
	o.Config.Provision()
	if err := o.Config.Validate(); err != nil {
		return nil, fmt.Errorf("proxy.%w", err)
	}
	if o.Decider == nil || o.Floor == nil || o.Dialer == nil || o.Audit == nil || o.Metrics == nil || o.Log == nil {
		return nil, errors.New("proxy: decider, floor, dialer, audit, metrics and log are required")
	}
	var pfx [4]byte
	if _, err := rand.Read(pfx[:]); err != nil {
		return nil, fmt.Errorf("request id prefix: %w", err)
	}
	s := &Server{
		cfg:       o.Config,
		log:       o.Log.Named("proxy"),
		audit:     o.Audit,
		metrics:   o.Metrics,
		dialer:    o.Dialer,
		floor:     o.Floor,
		fds:       o.FDs,
		secrets:   o.Secrets,
		argsKey:   o.ArgsKey,
		budgets:   o.Budgets,
		patterns:  o.SecretPatterns,
		given:     o.Given,
		own:       unmapAll(o.Own),
		origDst:   originalDst,
		leaves:    o.Leaves,
		roots:     o.UpstreamRoots,
		limits:    newLimiter(o.Config),
		sources:   newSourceLimiter(o.Config),
		failLog:   audit.NewFailLog(o.Log.Named("proxy"), 0),
		innerLog:  zap.NewStdLog(o.Log.Named("proxy").Named("inspect")),
		idPrefix:  hex.EncodeToString(pfx[:]) + "-",
		tunnels:   make(map[*tunnel]struct{}),
		parkAfter: cmp.Or(o.parkAfter, defaultParkAfter),
	}
	s.state.Store(s.newState(o.Decider, o.Identities))
	if o.Config.TunnelCopy == TunnelCopyBuffer {
		n := cmp.Or(o.copyBuf, tunnelCopyBuf)
		s.copyBufs = &sync.Pool{New: func() any { b := make([]byte, n); return &b }}
	}

	gp := goproxy.NewProxyHttpServer()
	gp.Logger = zapPrintf{s.log}
	// Every request sets its own RoundTripper (httpFlow); goproxy's
	// transport is only ever a pinned one.
	gp.Tr = newTransport(o.Config, o.Dialer)
	gp.ConnectDial = nil
	// Forward Accept-Encoding as the client sent it: the proxy does not
	// transcode bodies.
	gp.KeepAcceptEncoding = true
	gp.NonproxyHandler = http.HandlerFunc(s.serveNonProxy)
	gp.OnRequest().DoFunc(s.onRequest)
	s.gp = gp

	s.srv = &http.Server{
		Handler:           s,
		ConnContext:       connContext,
		MaxHeaderBytes:    o.Config.MaxHeaderBytes,
		ReadHeaderTimeout: o.Config.ReadHeaderTimeout,
		IdleTimeout:       o.Config.IdleTimeout,
		ErrorLog:          zap.NewStdLog(s.log.Named("http")),
		ConnState:         s.connState,
		// net/http would answer "OPTIONS *" itself with a 200 that no
		// handler sees, so nothing would decide or audit it.
		DisableGeneralOptionsHandler: true,
	}
	return s, nil
}

// ServeHTTP is the proxy listener's handler. CONNECT is hijacked here rather
// than through goproxy, whose hijack drops the bytes net/http had already
// buffered: a client may send its ClientHello in the same write as the
// CONNECT. Everything else is goproxy's.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c, ok := r.Context().Value(connKey{}).(*clientConn); ok {
		c.unhandled.Store(false)
	}
	if r.Method == http.MethodConnect {
		s.serveConnect(w, r)
		return
	}
	s.gp.ServeHTTP(w, r)
}

func (s *Server) newState(d policy.Decider, ids *identity.Store) *state {
	// Plain HTTP pools only bodyless requests, per identity (upstreamPool);
	// the Transport sends the requests with a body, each on a connection
	// of its own with "Connection: close", so a body the upstream did not
	// read is never parsed as another request.
	tr := newTransport(s.cfg, s.dialer)
	tr.DisableKeepAlives = true
	return &state{decider: &policy.PreDial{Engine: d, Floor: s.floor}, ids: ids, tr: tr,
		up: newUpstreamPool(s.cfg, s.dialer), tlsUp: newTLSTransports(s.cfg, s.dialer, s.roots)}
}

// Reload swaps the policy, identity table and upstream connections.
// In-flight requests finish with the state they started with, and the old
// state's connections close as they come back idle (the Transport's after
// its idle timeout at the latest); open tunnels are decided again and those
// no longer allowed are closed.
func (s *Server) Reload(d policy.Decider, ids *identity.Store) {
	st := s.newState(d, ids)
	old := s.state.Swap(st)
	old.closeIdle()
	s.revalidate(st)
}

func (st *state) closeIdle() {
	st.tr.CloseIdleConnections()
	st.up.closeIdle()
	st.tlsUp.closeIdle()
}

// Serve accepts on ln until Shutdown. It returns http.ErrServerClosed after
// a Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	l, err := s.admit(ln, "proxy")
	if err != nil {
		return err
	}
	return s.srv.Serve(l)
}

// admit wraps a client listener in the limits every client listener of
// the proxy shares: max_conns over all of them, and the descriptor budget.
// Its connections are *clientConn; each holds a max_conns slot until its
// handler gives it back (conns).
func (s *Server) admit(ln net.Listener, name string) (net.Listener, error) {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return nil, fmt.Errorf("%s: listener must be TCP, got %T", name, ln)
	}
	var l net.Listener = &capListener{
		TCPListener: tl,
		active:      &s.conns,
		max:         int64(s.cfg.MaxConns),
		rejected:    s.metrics.acceptRejected.Inc,
	}
	if s.fds != nil {
		// Outside the cap: a refused connection gives back the slot the
		// cap took for it.
		l = &fdlimit.Listener{
			Listener: l, Raw: tl, Budget: s.fds, Name: name, Audit: s.audit, Log: s.log,
			Release: func(net.Conn) { s.conns.Add(-1) },
			Refused: s.metrics.acceptRejected.Inc,
		}
	}
	return l, nil
}

func (s *Server) connState(c net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		s.metrics.active.WithLabelValues("connections").Inc()
		s.serving.add()
	case http.StateActive:
		if cc, ok := c.(*clientConn); ok {
			cc.status.Store(0)
			cc.unhandled.Store(true)
		}
	case http.StateClosed:
		s.metrics.active.WithLabelValues("connections").Dec()
		s.conns.Add(-1)
		if cc, ok := c.(*clientConn); ok && cc.unhandled.Load() {
			s.auditClientConnRefused(cc)
		}
		s.serving.remove()
	case http.StateHijacked:
		// The tunnel owns the connection and its slot from here on.
		s.metrics.active.WithLabelValues("connections").Dec()
		s.serving.remove()
	}
}

// newRequestID is unique per process run: a random prefix and a counter.
func (s *Server) newRequestID() string {
	n := s.reqID.Add(1)
	b := make([]byte, 0, len(s.idPrefix)+13)
	b = append(b, s.idPrefix...)
	b = strconv.AppendUint(b, n, 36)
	return string(b)
}

func clientAddr(remote string) netip.Addr {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// zapPrintf routes goproxy's warnings to the operational log.
type zapPrintf struct{ log *zap.Logger }

func (z zapPrintf) Printf(format string, v ...any) {
	z.log.Debug("goproxy", zap.String("msg", fmt.Sprintf(format, v...)))
}

// idleConnTimeout closes upstream keep-alive connections unused this long.
const idleConnTimeout = 90 * time.Second

func newTransport(c Config, d Dialer) *http.Transport {
	return &http.Transport{
		// Never an environment proxy, and only the pinned dialer: the
		// vetted address is the dialled address.
		Proxy:                  nil,
		DialContext:            d.DialContext,
		MaxIdleConns:           c.MaxIdleConns,
		MaxIdleConnsPerHost:    c.MaxIdleConnsPerHost,
		IdleConnTimeout:        idleConnTimeout,
		ResponseHeaderTimeout:  c.ResponseHeaderTimeout,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 1 << 20,
		DisableCompression:     true,
		ForceAttemptHTTP2:      false,
		WriteBufferSize:        16 << 10,
		ReadBufferSize:         16 << 10,
	}
}

func unmapAll(addrs []netip.Addr) []netip.Addr {
	out := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		out[i] = a.Unmap()
	}
	return out
}
