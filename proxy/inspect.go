package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/policy"
)

// LeafSource mints the certificate an inspected tunnel is terminated with:
// a leaf for host signed by identity's own CA (*ca.Authority). Leaf is
// called only for a host a CONNECT decision allowed with inspection.
type LeafSource interface {
	Leaf(identity, host string) (*tls.Certificate, error)
}

// innerALPN is what an inspected tunnel offers its client: only protocols
// whose requests egressd can read and decide one by one.
var innerALPN = []string{"h2", "http/1.1"}

// serveInspected terminates an allowed CONNECT whose rule asks for
// inspection: it reads the ClientHello (its server name must be the
// CONNECT host; an unreadable one is refused), accepts an Encrypted Client
// Hello whose outer server name is the CONNECT host (egressd terminates the
// TLS session and never decrypts ECH, so the outer name is the one it
// decides and answers: a GREASE ECH, which Chromium sends on every
// connection, carries on, and a real one is rejected by the handshake as
// RFC 9849 has it, the client seeing ech_required),
// completes the TLS handshake with a leaf for the CONNECT host from the
// identity's CA, and serves the requests inside over HTTP/1.1 or h2. Each
// request goes through the plain proxy's own path (goproxy's handler,
// Server.onRequest, httpFlow.RoundTrip), decided by policy.PreDial.
// DecideInspected with the tunnel's identity, and its upstream is dialled
// per request with TLS verified against the upstream roots.
func (t *tunnel) serveInspected() {
	var replay []byte
	var hello helloInfo
	ok := t.firstFlight(true, func(flight []byte, early *bytes.Reader, h helloInfo) bool {
		replay = bytes.Clone(flight)
		if early != nil && early.Len() > 0 {
			replay = append(replay, t.early[len(t.early)-early.Len():]...)
		}
		hello = h
		return true
	})
	if !ok {
		t.close()
		t.completeRun()
		return
	}
	if hello.ech && hello.sni == "" {
		// An ECH names its client-facing server in the outer server_name;
		// without one there is no name the CONNECT host was checked with.
		t.auditFlightRefusal(policy.ReasonEncryptedClientHello, "no outer server name")
		t.close()
		t.completeRun()
		return
	}
	// Only now, with the server name checked, is a leaf minted: for the
	// CONNECT host the decision allowed, never for a name the client chose.
	cert, err := t.s.leaves.Leaf(t.identity.ID, t.f.target.Host)
	if err != nil {
		t.auditFlightRefusal(policy.ReasonInspectUnavailable, "mint leaf: "+err.Error())
		t.close()
		t.completeRun()
		return
	}
	tc := tls.Server(&replayConn{Conn: t.client, pending: replay, in: &t.down2up, out: &t.up2down}, &tls.Config{
		Certificates: []tls.Certificate{*cert},
		NextProtos:   innerALPN,
		MinVersion:   tls.VersionTLS12,
	})
	tc.SetDeadline(time.Now().Add(t.s.cfg.PeekTimeout))
	if err := tc.Handshake(); err != nil {
		t.close()
		t.refusedDetail = clientHandshakeDetail(err, t.identity.ID)
		t.completeRun()
		return
	}
	tc.SetDeadline(time.Time{})
	// Keep-alive and h2 idle timeouts end a quiet tunnel; this ends a busy
	// one at tunnel_max_lifetime, as for an opaque tunnel.
	life := time.AfterFunc(time.Until(t.f.start.Add(t.s.cfg.TunnelMaxLifetime)), t.close)
	defer life.Stop()
	var c net.Conn = tc
	if tc.ConnectionState().NegotiatedProtocol != "h2" {
		// Not a *tls.Conn, so net/http serves it as HTTP/1.1 without
		// looking for h2, and its refusals are seen (innerConn).
		c = &innerConn{Conn: tc}
	}
	t.serveInner(c)
	t.close()
	t.completeRun()
}

// innerKey carries the inspected tunnel in its requests' contexts.
type innerKey struct{}

// innerTunnel is the inspected tunnel r came through, or nil for a plain
// proxy request.
func innerTunnel(r *http.Request) *tunnel {
	t, _ := r.Context().Value(innerKey{}).(*tunnel)
	return t
}

// serveInner serves the requests of one terminated tunnel until the client
// or a limit closes it: an http.Server of its own, with the proxy
// listener's header limits and timeouts, h2 configured when the client
// chose it in ALPN. Every request is handed to goproxy as an absolute
// https:// request for the CONNECT authority.
func (t *tunnel) serveInner(c net.Conn) {
	cfg := t.s.cfg
	l := &oneConnListener{conn: c, stop: make(chan struct{}), done: make(chan struct{})}
	ic, _ := c.(*innerConn)
	var srv *http.Server
	srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if ic != nil {
				ic.unhandled.Store(false)
			}
			t.serveInnerRequest(w, r)
			if l.hijacked.Load() {
				// A WebSocket relay ran on the hijacked connection and
				// has ended: so has the tunnel. net/http no longer
				// tracks the connection, so nothing else closes it.
				t.close()
				l.ended()
			}
		}),
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		ErrorLog:          t.s.innerLog,
		BaseContext:       func(net.Listener) context.Context { return context.WithValue(context.Background(), innerKey{}, t) },
		ConnState: func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				// A drain lets the request in flight finish, then closes
				// the connection (h2: GOAWAY) rather than waiting for the
				// client to leave a keep-alive connection. Published only
				// now that srv tracks the connection: a Shutdown before
				// that would make Serve return without taking it, and
				// nothing would ever close it. Set before draining is
				// read, as Shutdown sets draining before reading it: one
				// of the two sees the other.
				t.inner.Store(srv)
				if t.s.draining.Load() {
					go srv.Shutdown(context.Background()) //nolint:errcheck // no deadline: it returns nil once the connection has gone
				}
			case http.StateActive:
				if ic != nil {
					ic.status.Store(0)
					ic.unhandled.Store(true)
				}
			case http.StateHijacked:
				l.hijacked.Store(true)
			case http.StateClosed:
				if ic != nil && ic.unhandled.Load() {
					t.s.auditRefusedByHTTP(t.client.RemoteAddr().String(), int(ic.status.Load()), t)
				}
				l.ended()
			}
		},
		DisableGeneralOptionsHandler: true,
	}
	// net/http's h2 (the x/net/http2 server, bundled) for a client that
	// chose h2 in ALPN; it bounds request heads by srv.MaxHeaderBytes and
	// idles out by srv.IdleTimeout too.
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetHTTP2(true)
	srv.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 100}
	// The listener has one connection: Serve returns once the listener is
	// closed (a drain) or the connection ended, and the connection may
	// still be finishing a request in the first case.
	srv.Serve(l) //nolint:errcheck // the tunnel's completion record says how it ended
	if !l.wasTaken() {
		// Serve failed before it took the connection: no state change
		// will ever say it ended.
		c.Close()
		return
	}
	<-l.done
}

// serveInnerRequest hands one request of an inspected tunnel to goproxy,
// which runs onRequest and RoundTrip as for a plain request. A CONNECT
// inside the tunnel is refused: goproxy would open a tunnel of its own.
func (t *tunnel) serveInnerRequest(w http.ResponseWriter, r *http.Request) {
	t.lastActive.Store(time.Now().UnixNano())
	if r.Method == http.MethodConnect {
		t.s.auditAndRefuseInnerConnect(w, r, t)
		return
	}
	if r.ProtoMajor == 1 {
		// A request body streams while the response does (h2 always
		// allows it): net/http's HTTP/1 server would otherwise end the
		// body once the response starts.
		http.NewResponseController(w).EnableFullDuplex() //nolint:errcheck // h2 is full duplex already and reports ErrNotSupported
	}
	u := *r.URL
	u.Scheme, u.Host = "https", t.authority
	r.URL = &u
	if r.ProtoMajor == 2 && r.Body != nil && r.Body != http.NoBody {
		body := &innerBody{ReadCloser: r.Body}
		r.Body = body
		defer body.drain(t.s.cfg.BodyIdleTimeout)
	}
	t.s.gp.ServeHTTP(w, r)
}

// auditAndRefuseInnerConnect audits and answers a CONNECT sent inside an
// inspected tunnel.
func (s *Server) auditAndRefuseInnerConnect(w http.ResponseWriter, r *http.Request, t *tunnel) {
	f := &httpFlow{s: s, flowInfo: flowInfo{id: s.newRequestID(), kind: policy.KindHTTP,
		method: r.Method, identity: t.identity.ID, inspected: true, via: t.f.via}}
	f.setClient(t.client.RemoteAddr().String())
	f.target = claim{scheme: "https", authority: r.Host}.target()
	rf := refusalOf(policy.ReasonMalformedRequest)
	if err := s.auditDecision(&f.flowInfo, verdict{Verdict: audit.Verdict{Reason: rf.Reason}, detail: "CONNECT inside an inspected tunnel"}); err != nil {
		rf = refusalOf(policy.ReasonAuditUnavailable)
	}
	rf.serve(w, r, f.id)
}

// innerConn is an inspected tunnel's HTTP/1.1 connection, watched as the
// proxy listener's clientConn is: net/http answers a malformed request,
// an oversized head or a slow one itself, without a handler, so the
// ConnState hook marks a request unhandled until the handler clears the
// mark, and the status written in between says why it was refused.
type innerConn struct {
	net.Conn
	unhandled atomic.Bool
	status    atomic.Int32
}

func (c *innerConn) Write(b []byte) (int, error) {
	if c.unhandled.Load() && c.status.Load() == 0 {
		c.status.Store(int32(statusOf(b)))
	}
	return c.Conn.Write(b)
}

// replayConn reads pending (the ClientHello bytes the proxy read to check
// them) before the connection's own bytes, and counts the bytes each way
// for the tunnel's completion record.
type replayConn struct {
	net.Conn
	pending []byte
	in, out *atomic.Int64
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		c.in.Add(int64(n))
		return n, nil
	}
	n, err := c.Conn.Read(p)
	c.in.Add(int64(n))
	return n, err
}

func (c *replayConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.out.Add(int64(n))
	return n, err
}

// oneConnListener hands its one connection to http.Server.Serve, then
// blocks until the connection ended or the listener is closed, so Serve
// returns when the tunnel ends or drains.
type oneConnListener struct {
	conn  net.Conn
	mu    sync.Mutex
	taken bool
	// stop is closed by Close (http.Server.Shutdown), done when the
	// connection ended (closed, or its hijacked relay over).
	stop, done         chan struct{}
	stopOnce, doneOnce sync.Once
	hijacked           atomic.Bool
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if !l.taken {
		l.taken = true
		l.mu.Unlock()
		return l.conn, nil
	}
	l.mu.Unlock()
	select {
	case <-l.stop:
	case <-l.done:
	}
	return nil, net.ErrClosed
}

// wasTaken reports whether Accept handed the connection out.
func (l *oneConnListener) wasTaken() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.taken
}

func (l *oneConnListener) ended() { l.doneOnce.Do(func() { close(l.done) }) }

func (l *oneConnListener) Close() error {
	l.stopOnce.Do(func() { close(l.stop) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }
