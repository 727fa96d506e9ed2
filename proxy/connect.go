package proxy

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/egressd/egressd/policy"
)

// serveConnect takes the raw connection, with whatever the client sent after
// its CONNECT head, and hands it to connectHijack.
func (s *Server) serveConnect(w http.ResponseWriter, r *http.Request) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "egressd: CONNECT needs HTTP/1.1", http.StatusBadRequest)
		return
	}
	raw, rw, err := hj.Hijack()
	if err != nil {
		s.log.Warn("hijack failed", zap.Error(err))
		return
	}
	var early []byte
	if n := rw.Reader.Buffered(); n > 0 {
		b, _ := rw.Peek(n)
		early = bytes.Clone(b)
	}
	if c, ok := raw.(*clientConn); ok {
		// The tunnel splices the bare TCP connection.
		raw = c.TCPConn
	}
	s.connectHijack(r, raw, early)
}

// connectHijack opens the tunnel a CONNECT asks for (openTunnel), the
// client answered in HTTP (connectArrival).
func (s *Server) connectHijack(r *http.Request, client net.Conn, early []byte) {
	s.openTunnel(tunnelRequest{ctx: r.Context(), client: client, early: early, remote: r.RemoteAddr,
		authority: r.RequestURI, traceparent: traceparentOf(r.Header), arrival: connectArrival{r: r},
		release: func() { s.conns.Add(-1) }})
}

// tunnelRequest is one request for a tunnel, however it arrived: the
// CONNECT of the proxy listener, a SOCKS5 request, or a connection the
// network redirected to the transparent listener.
type tunnelRequest struct {
	ctx    context.Context
	client net.Conn
	// early is what the client sent before the tunnel opened that belongs
	// to it: bytes after a CONNECT head, or a transparent connection's
	// first flight, read to learn its target.
	early []byte
	// remote is the client's address (a RemoteAddr).
	remote string
	// traceparent is the W3C trace context a CONNECT head carried, when
	// valid (traceparentOf); other arrivals have no head.
	traceparent string
	// authority is the host:port the tunnel is decided for.
	authority string
	arrival   arrival
	// echNeedsInspection refuses an Encrypted Client Hello unless the
	// rule inspects (tunnel.echNeedsInspection).
	echNeedsInspection bool
	// release gives back what the listener holds for the connection (its
	// max_conns slot); openTunnel calls it once client is closed.
	release func()
}

// cleanups are what openTunnel undoes, last first: when it returns, or,
// for an opaque tunnel that runs on without it, when that tunnel ends.
type cleanups []func()

func (c *cleanups) add(f func()) { *c = append(*c, f) }

func (c cleanups) run() {
	for i := len(c) - 1; i >= 0; i-- {
		c[i]()
	}
}

// openTunnel is the one implementation of a tunnel, whichever listener it
// arrived on: it identifies, decides, audits and dials, checks the first
// client bytes, then copies the tunnel until it ends. Only how the
// client is identified and answered is the arrival's. An opaque tunnel
// runs on after openTunnel returns (tunnel.start), so that its caller's
// goroutine, and what net/http allocated for a CONNECT, are not held for
// the tunnel's life; every other path ends before it returns.
func (s *Server) openTunnel(req tunnelRequest) {
	client := req.client
	var undo cleanups
	undo.add(req.release)
	undo.add(func() { client.Close() })
	defer func() { undo.run() }()
	start := time.Now()
	st := s.state.Load()
	f := s.tunnelFlow(req.arrival.via(), req.remote, req.authority, start)
	f.traceparent = req.traceparent
	client.SetDeadline(start.Add(s.cfg.DialTimeout + s.cfg.ReadHeaderTimeout))
	refuse := func(rf refusal) { s.auditAndRefuseTunnel(f, client, req.arrival, rf) }

	if s.draining.Load() {
		refuse(refusalOf(policy.ReasonShuttingDown))
		return
	}
	if s.sources.exhausted(f.client) {
		refuse(refusalOf(policy.ReasonSourceRateLimited))
		return
	}
	id, cred, reason := req.arrival.identify(st.ids, f.client)
	if reason != "" {
		f.user = cred.user
		s.sources.refused(f.client)
		refuse(deniedRefusal(reason))
		return
	}
	f.identity = id.ID
	if rf, over := s.overByteBudget(st.ids, id.ID); over {
		refuse(rf)
		return
	}
	release, reason := s.limits.acquire(id.ID)
	if reason != "" {
		refuse(deniedRefusal(reason))
		return
	}
	undo.add(release)

	out := st.decider.DecideConnect(req.ctx, id, req.authority)
	if out.Facts != nil {
		f.target = targetOf(out.Facts)
	} else {
		f.target.Host = unparsedAuthority(req.authority)
	}
	s.metrics.decisionSeconds.Observe(time.Since(start).Seconds())
	if !out.Decision.Allow {
		refuse(outcomeRefusal(&out))
		return
	}
	f.inspected = out.Decision.Inspect
	if f.inspected && s.leaves == nil {
		rf := refusalOf(policy.ReasonInspectUnavailable)
		rf.Rule, rf.Policy, rf.detail = out.Decision.Rule, out.Decision.Policy, "no certificate authority configured"
		refuse(rf)
		return
	}
	if reason, detail := req.arrival.vetTarget(f.target, f.inspected); reason != "" {
		rf := deniedRefusal(reason)
		rf.Rule, rf.Policy, rf.detail = out.Decision.Rule, out.Decision.Policy, detail
		refuse(rf)
		return
	}
	if err := s.auditDecision(f, allowed(&out.Decision)); err != nil {
		s.respondRefusedTunnel(f, client, req.arrival, refusalForAuditErr(err))
		return
	}
	t := &tunnel{s: s, f: f, client: client, early: req.early, identity: id, cred: cred,
		authority: req.authority, arrival: req.arrival, echNeedsInspection: req.echNeedsInspection}
	if f.inspected {
		if s.beginTunnel(req.ctx, st, t) {
			undo.add(func() { s.untrack(t) })
			t.serveInspected()
		}
		return
	}

	dctx, cancel := context.WithTimeout(context.Background(), s.cfg.DialTimeout)
	up, err := s.dialer.DialContext(dctx, "tcp", net.JoinHostPort(f.target.Host, strconv.Itoa(int(f.target.Port))))
	cancel()
	s.metrics.upstreamSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		rf := refusalFor(stageDial, policy.Decision{}, err)
		t.complete(rf.status, rf.Reason, rf.detail)
		s.respondRefusedTunnel(f, client, req.arrival, rf)
		return
	}
	t.up = up
	undo.add(func() { up.Close() })
	if ap, ok := up.RemoteAddr().(*net.TCPAddr); ok {
		t.addr = netip.AddrPortFrom(ap.AddrPort().Addr().Unmap(), ap.AddrPort().Port())
		t.ip = t.addr.Addr().String()
	}
	if !s.beginTunnel(req.ctx, st, t) {
		return
	}
	undo.add(func() { s.untrack(t) })
	// The arrival's request (a CONNECT's, with its head) is not kept for
	// the tunnel's life.
	t.arrival = nil
	t.start(out.Decision.TLS, undo.run)
	undo = nil
}

// tunnelFlow is the flow of a tunnel request from remote for authority.
func (s *Server) tunnelFlow(via, remote, authority string, start time.Time) *flowInfo {
	f := &flowInfo{id: s.newRequestID(), kind: policy.KindConnect,
		method: http.MethodConnect, start: start, via: via}
	f.setClient(remote)
	f.target = claim{authority: authority}.target()
	return f
}

// beginTunnel tells the client its tunnel is open (the arrival's answer:
// a CONNECT's 200) and tracks the tunnel for drains and reloads; it
// reports whether to run the tunnel, which the caller then untracks
// when it ends.
func (s *Server) beginTunnel(ctx context.Context, st *state, t *tunnel) bool {
	if err := t.arrival.answerOpen(t.client); err != nil {
		t.complete(0, "", "client gone: "+err.Error())
		return false
	}
	t.client.SetDeadline(time.Time{})
	if !s.track(t) {
		t.complete(0, policy.ReasonShuttingDown, "")
		return false
	}
	// A reload between this tunnel's decision and track missed it in
	// revalidate's snapshot; it swapped the state before taking that
	// snapshot, so the change shows here.
	if cur := s.state.Load(); cur != st {
		if reason := t.recheck(ctx, cur); reason != "" {
			t.revoke(reason)
		}
	}
	t.opened = time.Now()
	return true
}

// auditAndRefuseTunnel audits a tunnel's refusal and answers it as its
// arrival does. If the audit append fails the client still gets a
// refusal, now for audit_unavailable.
func (s *Server) auditAndRefuseTunnel(f *flowInfo, c net.Conn, a arrival, rf refusal) {
	if err := s.auditDecision(f, rf.verdict); err != nil {
		rf = refusalOf(policy.ReasonAuditUnavailable)
	}
	s.respondRefusedTunnel(f, c, a, rf)
}

// respondRefusedTunnel answers a tunnel's refusal as its arrival does,
// without auditing it: its record is appended already, or the append
// failed and rf says so.
func (s *Server) respondRefusedTunnel(f *flowInfo, c net.Conn, a arrival, rf refusal) {
	if ce := s.log.Check(zap.DebugLevel, "denied"); ce != nil {
		ce.Write(zap.String("request", f.id), zap.String("kind", "connect"), zap.String("via", f.via),
			zap.String("identity", f.identity), zap.Stringer("reason", rf.Reason))
	}
	_ = a.answerRefused(c, f, rf) // the connection is closed next; a client gone has nothing to be told
}

func (s *Server) track(t *tunnel) bool {
	s.tunnelsMu.Lock()
	defer s.tunnelsMu.Unlock()
	if s.draining.Load() {
		return false
	}
	s.tunnels[t] = struct{}{}
	s.tunnelsWG.Add(1)
	s.metrics.active.WithLabelValues("tunnels").Inc()
	return true
}

// revalidate re-decides every open tunnel under st and closes those it no
// longer allows: a revoked rule, identity or internal allowance must not
// live on for a tunnel's lifetime (24 h by default). The decisions run
// without the tunnel lock; a tunnel tracked after the snapshot checks the
// state itself (connectHijack).
func (s *Server) revalidate(st *state) {
	s.tunnelsMu.Lock()
	open := make([]*tunnel, 0, len(s.tunnels))
	for t := range s.tunnels {
		open = append(open, t)
	}
	s.tunnelsMu.Unlock()
	for _, t := range open {
		if reason := t.recheck(context.Background(), st); reason != "" {
			t.revoke(reason)
		}
	}
}

func (s *Server) untrack(t *tunnel) {
	s.tunnelsMu.Lock()
	delete(s.tunnels, t)
	s.tunnelsMu.Unlock()
	s.tunnelsWG.Done()
	s.metrics.active.WithLabelValues("tunnels").Dec()
}

// unparsedAuthority is what the audit record keeps of a CONNECT target that
// did not parse: enough to recognise it, bounded, and never a userinfo part
// ("user:token@host:443" carries a credential), so everything up to the
// last '@' is dropped.
func unparsedAuthority(target string) string {
	if i := strings.LastIndexByte(target, '@'); i >= 0 {
		target = target[i+1:]
	}
	return target[:min(len(target), 256)]
}
