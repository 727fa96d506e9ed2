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

// connectHijack identifies, decides, audits and dials a CONNECT, checks the
// first client bytes (early: those the client sent along with its CONNECT
// head), then copies the tunnel until it ends.
func (s *Server) connectHijack(r *http.Request, client net.Conn, early []byte) {
	defer s.conns.Add(-1)
	defer client.Close()
	start := time.Now()
	st := s.state.Load()
	f := &flowInfo{id: s.newRequestID(), kind: policy.KindConnect,
		method: http.MethodConnect, start: start}
	f.setClient(r.RemoteAddr)
	f.setTraceparent(r.Header)
	f.target = claim{authority: r.RequestURI}.target()
	f.accept = acceptOf(r)
	client.SetDeadline(start.Add(s.cfg.DialTimeout + s.cfg.ReadHeaderTimeout))

	if s.draining.Load() {
		s.auditAndRefuseConn(f, client, refusalOf(policy.ReasonShuttingDown))
		return
	}
	if s.sources.exhausted(f.client) {
		s.auditAndRefuseConn(f, client, refusalOf(policy.ReasonSourceRateLimited))
		return
	}
	id, cred, reason := authenticate(st.ids, r, f.client)
	if reason != "" {
		f.user = cred.user
		s.sources.refused(f.client)
		s.auditAndRefuseConn(f, client, deniedRefusal(reason))
		return
	}
	f.identity = id.ID
	if rf, over := s.overByteBudget(st.ids, id.ID); over {
		s.auditAndRefuseConn(f, client, rf)
		return
	}
	release, reason := s.limits.acquire(id.ID)
	if reason != "" {
		s.auditAndRefuseConn(f, client, deniedRefusal(reason))
		return
	}
	defer release()

	out := st.decider.DecideConnect(r.Context(), id, r.RequestURI)
	if out.Facts != nil {
		f.target = targetOf(out.Facts)
	} else {
		f.target.Host = unparsedAuthority(r.RequestURI)
	}
	s.metrics.decisionSeconds.Observe(time.Since(start).Seconds())
	if !out.Decision.Allow {
		s.auditAndRefuseConn(f, client, outcomeRefusal(&out))
		return
	}
	f.inspected = out.Decision.Inspect
	if f.inspected && s.leaves == nil {
		rf := refusalOf(policy.ReasonInspectUnavailable)
		rf.Rule, rf.Policy, rf.detail = out.Decision.Rule, out.Decision.Policy, "no certificate authority configured"
		s.auditAndRefuseConn(f, client, rf)
		return
	}
	if err := s.auditDecision(f, allowed(&out.Decision)); err != nil {
		s.respondRefusedConn(f, client, refusalForAuditErr(err))
		return
	}
	if f.inspected {
		t := &tunnel{s: s, f: f, client: client, early: early, identity: id, cred: cred, authority: r.RequestURI}
		s.runTunnel(r.Context(), st, t, t.serveInspected)
		return
	}

	dctx, cancel := context.WithTimeout(context.Background(), s.cfg.DialTimeout)
	up, err := s.dialer.DialContext(dctx, "tcp", net.JoinHostPort(f.target.Host, strconv.Itoa(int(f.target.Port))))
	cancel()
	s.metrics.upstreamSeconds.Observe(time.Since(start).Seconds())
	t := &tunnel{s: s, f: f, client: client, early: early, identity: id, cred: cred, authority: r.RequestURI}
	if err != nil {
		rf := refusalFor(stageDial, policy.Decision{}, err)
		t.complete(rf.status, rf.Reason, rf.detail)
		s.respondRefusedConn(f, client, rf)
		return
	}
	t.up = up
	defer up.Close()
	if ap, ok := up.RemoteAddr().(*net.TCPAddr); ok {
		t.addr = netip.AddrPortFrom(ap.AddrPort().Addr().Unmap(), ap.AddrPort().Port())
		t.ip = t.addr.Addr().String()
	}
	tlsOnly := out.Decision.TLS
	s.runTunnel(r.Context(), st, t, func() { t.run(tlsOnly) })
}

// runTunnel answers an allowed CONNECT with 200, tracks the tunnel for
// drains and reloads, and runs it (copies it, or serves it inspected).
func (s *Server) runTunnel(ctx context.Context, st *state, t *tunnel, run func()) {
	if _, err := t.client.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		t.complete(0, "", "client gone: "+err.Error())
		return
	}
	t.client.SetDeadline(time.Time{})
	if !s.track(t) {
		t.complete(0, policy.ReasonShuttingDown, "")
		return
	}
	defer s.untrack(t)
	// A reload between this tunnel's decision and track missed it in
	// revalidate's snapshot; it swapped the state before taking that
	// snapshot, so the change shows here.
	if cur := s.state.Load(); cur != st {
		if reason := t.recheck(ctx, cur); reason != "" {
			t.revoke(reason)
		}
	}
	run()
}

// auditAndRefuseConn audits a CONNECT refusal and writes it on the raw
// connection. If the audit append fails the client still gets a refusal,
// now for audit_unavailable.
func (s *Server) auditAndRefuseConn(f *flowInfo, c net.Conn, rf refusal) {
	if err := s.auditDecision(f, rf.verdict); err != nil {
		rf = refusalOf(policy.ReasonAuditUnavailable)
	}
	s.respondRefusedConn(f, c, rf)
}

// respondRefusedConn writes a CONNECT refusal on the raw connection without
// auditing it: its record is appended already, or the append failed and rf
// says so.
func (s *Server) respondRefusedConn(f *flowInfo, c net.Conn, rf refusal) {
	if ce := s.log.Check(zap.DebugLevel, "denied"); ce != nil {
		ce.Write(zap.String("request", f.id), zap.String("kind", "connect"),
			zap.String("identity", f.identity), zap.Stringer("reason", rf.Reason))
	}
	_ = rf.write(c, f.accept, f.id) // the connection is closed next; a client gone has nothing to be told
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
