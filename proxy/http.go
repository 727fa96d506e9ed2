package proxy

import (
	"context"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/elazarl/goproxy"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/llm"
	"github.com/egressd/egressd/proxy/broker"
	"github.com/egressd/egressd/proxy/budget"
)

// httpFlow is one allowed plain-HTTP request on its way upstream.
type httpFlow struct {
	flowInfo
	s            *Server
	st           *state
	identity     policy.Identity
	base         url.URL // the request URL as the client sent it, for redirects
	releaseLimit func()
	cancel       context.CancelFunc
	idle         *time.Timer
	ip           string
	// conn is the Transport's connection for the request (GotConn), closed
	// after a response that must not leave it reused (RoundTrip).
	conn      net.Conn
	sent      countingBody
	recv      *responseBody
	completed bool
	fast      bool // sent through the upstream pool, not the Transport
	// cred is the credential work of a request whose rule binds secrets.
	cred *broker.Plan
	// upgrade marks an inspected WebSocket handshake sent upstream.
	upgrade bool
	// opts are the allowing rule's request keys; model is the request
	// read as a model API call, reserve its hold on the identity's token
	// budget (nil when the rule has none), settled once its usage is known.
	opts     *policy.RuleOptions
	model    *llm.Request
	reserve  *budget.Reservation
	reserved int64
	settled  bool
	// readBytes is how much of the body the policy read to decide on it.
	readBytes int64

	// clientCtx is the client's request context: it ends when the client
	// hangs up, while the upstream request's (upCtx) also ends on idle
	// timeouts, with a *bodyIdleError as its cause.
	clientCtx context.Context
	upCtx     context.Context
}

// onRequest identifies, limits, decides and audits a plain-HTTP request, or
// a request inside an inspected tunnel (identified by its CONNECT), then
// rewrites it for the upstream. A non-nil response refuses the request.
func (s *Server) onRequest(r *http.Request, pctx *goproxy.ProxyCtx) (*http.Request, *http.Response) {
	start := time.Now()
	st := s.state.Load()
	inner := innerTunnel(r)
	f := &httpFlow{s: s, st: st, flowInfo: flowInfo{
		id: s.newRequestID(), kind: policy.KindHTTP, method: r.Method, start: start, inspected: inner != nil,
		via: audit.ViaProxy,
	}}
	if inner != nil {
		f.via = inner.f.via
	}
	f.setClient(r.RemoteAddr)
	f.traceparent = traceparentOf(r.Header)
	f.target = claim{scheme: r.URL.Scheme, authority: r.URL.Host, path: r.URL.EscapedPath(), query: r.URL.RawQuery}.target()

	if s.draining.Load() {
		return r, s.auditAndRefuse(f, r, refusalOf(policy.ReasonShuttingDown))
	}
	var id policy.Identity
	if inner != nil {
		// The tunnel's CONNECT authenticated the identity.
		id = inner.identity
	} else {
		if s.sources.exhausted(f.client) {
			return r, s.auditAndRefuse(f, r, refusalOf(policy.ReasonSourceRateLimited))
		}
		var cred credential
		var reason policy.Reason
		id, cred, reason = authenticate(st.ids, r, f.client)
		if reason != "" {
			f.user = cred.user
			s.sources.refused(f.client)
			return r, s.auditAndRefuse(f, r, deniedRefusal(reason))
		}
	}
	f.identity, f.flowInfo.identity = id, id.ID
	if rf, over := s.overByteBudget(st.ids, id.ID); over {
		return r, s.auditAndRefuse(f, r, rf)
	}
	if inner != nil && r.ProtoMajor == 2 {
		// net/http's h2 server takes any :path a header value may hold.
		if err := policy.CheckH2Path(r.RequestURI); err != nil {
			f.target.Path, f.target.Query, _ = strings.Cut(r.RequestURI, "?")
			return r, s.auditAndRefuse(f, r, refusalFor(stageParse, policy.Decision{}, err))
		}
	}
	release, reason := s.limits.acquire(id.ID)
	if reason != "" {
		return r, s.auditAndRefuse(f, r, deniedRefusal(reason))
	}
	f.releaseLimit = release

	req := policy.HTTPRequest{Method: r.Method, Target: r.RequestURI, HostHeader: r.Host}
	var kept *keptBody
	if hasBody(r) {
		kept = &keptBody{r: r.Body}
		req.Body, req.ContentType, req.ContentEncoding = kept, r.Header.Get("Content-Type"), strings.Join(r.Header.Values("Content-Encoding"), ", ")
	}
	var out policy.Outcome
	if inner != nil {
		out = st.decider.DecideInspected(r.Context(), id, inner.authority, req)
	} else {
		out = st.decider.DecideHTTP(r.Context(), id, policy.KindHTTP, req)
	}
	if out.Facts != nil {
		f.target = targetOf(out.Facts)
	}
	f.opts = out.Decision.Options
	f.notes = s.notesOf(bodyOf(&out))
	if kept != nil && kept.read {
		// The policy read the body to decide on it: what it read goes
		// upstream, byte for byte, and the rest (none, unless refused)
		// after it.
		r.Body = kept.replay(r.Body)
		f.readBytes = int64(kept.buf.Len())
	}
	s.metrics.decisionSeconds.Observe(time.Since(start).Seconds())
	if !out.Decision.Allow {
		rf := outcomeRefusal(&out)
		if b := bodyOf(&out); b != nil && b.MCP != nil && out.Err == nil {
			s.tellRefusal(&rf, f, &out.Decision, b.MCP)
		}
		f.release()
		return r, s.auditAndRefuse(f, r, rf)
	}
	if smuggledBody(r) {
		// Refused after the decision so that the record names the target.
		f.release()
		return r, s.auditAndRefuse(f, r, refusalOf(policy.ReasonRequestBodyNotAllowed))
	}
	if rf, refused := f.checkSize(r, &out.Decision); refused {
		f.release()
		return r, s.auditAndRefuse(f, r, rf)
	}
	if rf, refused := f.prepareModel(r, &out); refused {
		f.release()
		return r, s.auditAndRefuse(f, r, rf)
	}
	if rf, denied := f.prepareCredentials(r, &out.Decision); denied {
		f.release()
		return r, s.auditAndRefuse(f, r, rf)
	}
	if rf, denied := f.checkLeaks(r, &out.Decision); denied {
		f.release()
		return r, s.auditAndRefuse(f, r, rf)
	}
	if err := s.auditDecision(&f.flowInfo, allowed(&out.Decision)); err != nil {
		f.release()
		return r, s.respondRefused(f, r, refusalForAuditErr(err))
	}

	f.base = *r.URL
	outReq := f.upstreamRequest(r)
	if f.opts != nil && (f.opts.MCP != nil || f.opts.LLM != nil) {
		// The answer is filtered or read for its usage: have it sent
		// uncompressed (the transport then asks for gzip and decodes it).
		outReq.Header.Del("Accept-Encoding")
	}
	f.applyCredentials(outReq)
	pctx.UserData = f
	pctx.RoundTripper = f
	return outReq, nil
}

// auditAndRefuse audits a refusal and builds its response. If the audit append
// fails the client still gets a refusal, now for audit_unavailable.
func (s *Server) auditAndRefuse(f *httpFlow, r *http.Request, rf refusal) *http.Response {
	if err := s.auditDecision(&f.flowInfo, rf.verdict); err != nil {
		rf = refusalOf(policy.ReasonAuditUnavailable)
	}
	return s.respondRefused(f, r, rf)
}

// respondRefused builds the response of a refusal without auditing it: its
// record is appended already, or the append failed and rf says so.
func (s *Server) respondRefused(f *httpFlow, r *http.Request, rf refusal) *http.Response {
	if ce := s.log.Check(zap.DebugLevel, "denied"); ce != nil {
		ce.Write(zap.String("request", f.id), zap.String("kind", f.kind.String()),
			zap.String("identity", f.flowInfo.identity), zap.Stringer("reason", rf.Reason))
	}
	return rf.response(r, f.id)
}

// upstreamRequest builds the upstream request from r: hop-by-hop headers
// removed, the decided host and port dialled, and the request target sent
// byte-for-byte as the client wrote it (URL.Opaque stops net/http from
// re-encoding the path). It is built field by field, never copied: the
// client's connection semantics (Close, a Connection header) belong to the
// client's hop and must not reach the shared upstream transports, where a
// Close marks a whole h2 connection unusable under the identity's other
// requests. Its body streams from the client and cannot be rewound, so a
// transport never sends it twice.
func (f *httpFlow) upstreamRequest(r *http.Request) *http.Request {
	rawPath := f.target.Path
	if rawPath == "" {
		rawPath = "/"
	}
	f.clientCtx = r.Context()
	ctx, cancel := context.WithCancelCause(f.clientCtx)
	f.cancel = func() { cancel(nil) }
	idle := &bodyIdleError{after: f.s.cfg.BodyIdleTimeout}
	f.idle = time.AfterFunc(idle.after, func() { cancel(idle) })
	f.upCtx = ctx
	// The pool speaks plain HTTP/1.1; inspected requests go over TLS
	// through their identity's transport.
	f.fast = !f.inspected && fastPathOK(r)
	if !f.fast {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) {
			if ap, ok := ci.Conn.RemoteAddr().(*net.TCPAddr); ok {
				f.ip = ap.AddrPort().Addr().Unmap().String()
			}
			f.conn = ci.Conn
		}})
	}
	u := *r.URL
	u.Host = net.JoinHostPort(f.target.Host, strconv.Itoa(int(f.target.Port)))
	u.Opaque = rawPath
	if strings.HasPrefix(rawPath, "//") {
		// A path beginning with "//" would read as an authority in origin
		// form; send it in absolute form instead.
		u.Opaque = "//" + u.Host + rawPath
	}
	u.RawPath, u.RawQuery, u.ForceQuery = "", f.target.Query, false
	// The client's header map is not used again: strip it in place.
	out := (&http.Request{
		Method:     r.Method,
		URL:        &u,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     r.Header,
		Host:       hostHeader(f.target.Scheme, f.target.Host, f.target.Port),
	}).WithContext(ctx)
	f.upgrade = f.inspected && isWebSocketUpgrade(r)
	teTrailers := f.inspected && headerHasToken(r.Header, "Te", "trailers")
	stripHopByHop(out.Header)
	stripRequestOnly(out.Header)
	if f.upgrade {
		// Decided as a GET like any other; the upstream may switch it to
		// a WebSocket relayed both ways (RoundTrip).
		out.Header.Set("Connection", "Upgrade")
		out.Header.Set("Upgrade", "websocket")
	}
	if teTrailers {
		// gRPC servers want to know the trailers (grpc-status) reach the
		// client; the proxy forwards them.
		out.Header.Set("Te", "trailers")
	}
	// Only a request that has a body is sent with one (hasBody).
	if hasBody(r) {
		f.sent.ReadCloser, f.sent.idle, f.sent.timeout = f.leakBody(r.Body, r.Header), f.idle, f.s.cfg.BodyIdleTimeout
		// Declared trailers are sent after the body: strip the names
		// declared now (they would be announced in the Trailer header) and
		// the values net/http merged in when the body ended, which may
		// name fields the client never declared.
		stripHopByHop(r.Trailer)
		f.sent.trailer = r.Trailer
		out.Trailer, out.ContentLength, out.Body = r.Trailer, r.ContentLength, &f.sent
	}
	return out
}

// RoundTrip sends the request through the pinned transport and checks a
// redirect before the client sees it. It never returns an error: failures
// become refusal responses that name no internal address.
func (f *httpFlow) RoundTrip(req *http.Request, _ *goproxy.ProxyCtx) (*http.Response, error) {
	s := f.s
	t0 := time.Now()
	var resp *http.Response
	var err error
	switch {
	case f.cleartextCredential():
		resp, f.ip, err = f.sendInternal(req)
	case f.fast:
		resp, f.ip, err = f.st.up.roundTrip(req, f.flowInfo.identity, req.URL.Host)
	case f.inspected:
		alone := req.Body != nil || f.cred.Carries()
		resp, err = f.st.tlsUp.get(f.flowInfo.identity).roundTrip(req, alone, f.upgrade)
	default:
		resp, err = f.st.tr.RoundTrip(req)
	}
	s.metrics.upstreamSeconds.Observe(time.Since(t0).Seconds())
	if err == nil && resp.ProtoMajor == 1 && f.conn != nil && bodylessWithLength(req, resp) {
		// The Transport would keep the connection for the identity's next
		// request, and whatever body the upstream sends anyway would be
		// read as its response.
		f.conn.Close()
	}
	if c := f.sent.cut.Load(); c != nil {
		// The body was stopped mid-stream: the upstream has no whole
		// request, whatever it answered to the part it got.
		if err == nil {
			resp.Body.Close()
		}
		rf := deniedRefusal(c.reason)
		f.complete(rf.status, c.reason, c.detail)
		return rf.response(req, f.id), nil
	}
	if err != nil {
		if f.clientCtx.Err() != nil {
			// The client hung up first: the decision stands, nothing
			// failed upstream.
			f.completeClientClosed("waiting")
			return refusalOf(policy.ReasonClientClosed).response(req, f.id), nil
		}
		rf := refusalFor(stageDial, policy.Decision{}, err)
		f.complete(rf.status, rf.Reason, rf.detail)
		return rf.response(req, f.id), nil
	}
	if isRedirect(resp.StatusCode) {
		// Clients differ in which Location they follow when there are
		// several, so every one must be allowed.
		for _, loc := range resp.Header.Values("Location") {
			if loc == "" {
				continue
			}
			if rf, denied := f.checkRedirect(req, resp.StatusCode, loc); denied {
				resp.Body.Close()
				f.complete(rf.status, rf.Reason, "")
				return rf.response(req, f.id), nil
			}
		}
	}
	stripHopByHop(resp.Header)
	if rf, refused := f.filterAnswer(resp); refused {
		resp.Body.Close()
		f.complete(rf.status, rf.Reason, rf.detail)
		return rf.response(req, f.id), nil
	}
	if rf, refused := f.scrubResponse(resp); refused {
		resp.Body.Close()
		f.complete(rf.status, rf.Reason, rf.detail)
		return rf.response(req, f.id), nil
	}
	f.recv = &responseBody{countingBody: countingBody{ReadCloser: resp.Body, idle: f.idle, timeout: s.cfg.BodyIdleTimeout}, f: f, status: resp.StatusCode}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return f.switched(req, resp)
	}
	resp.Body = f.recv
	return resp, nil
}

// isRedirect covers the whole 3xx class, not only the codes clients follow
// today: which codes a client follows (300 with a Location, 304 from a
// confused cache, codes not yet registered) is up to the client, and the
// decision must not depend on it.
func isRedirect(code int) bool {
	return code >= 300 && code <= 399
}

// checkRedirect decides the Location of a 3xx as kind redirect for the same
// identity, and audits the decision.
func (f *httpFlow) checkRedirect(req *http.Request, code int, loc string) (refusal, bool) {
	s := f.s
	method := req.Method
	if code == http.StatusSeeOther {
		method = http.MethodGet
	}
	next, err := f.base.Parse(loc)
	rf := refusalOf(policy.ReasonRedirectDenied)
	rinfo := f.flowInfo
	rinfo.kind = policy.KindRedirect
	rinfo.method = method
	if err != nil {
		rinfo.target = Target{}
		if err := s.auditDecision(&rinfo, verdict{Verdict: audit.Verdict{Reason: policy.ReasonRedirectDenied}, detail: "unparseable location"}); err != nil {
			return refusalOf(policy.ReasonAuditUnavailable), true
		}
		return rf, true
	}
	out := f.st.decider.DecideHTTP(req.Context(), f.identity, policy.KindRedirect, policy.HTTPRequest{Method: method, Target: next.String()})
	rinfo.target = targetOf(out.Facts)
	if out.Decision.Allow {
		if err := s.auditDecision(&rinfo, allowed(&out.Decision)); err != nil {
			return refusalForAuditErr(err), true
		}
		return refusal{}, false
	}
	rf.Rule = out.Decision.Rule
	if err := s.auditDecision(&rinfo, verdict{Verdict: audit.Verdict{Reason: policy.ReasonRedirectDenied, Rule: out.Decision.Rule, Policy: out.Decision.Policy}, detail: "policy reason: " + out.Decision.Reason.String()}); err != nil {
		return refusalOf(policy.ReasonAuditUnavailable), true
	}
	return rf, true
}

// complete appends the completion record once and releases the request's
// limits. A reason makes the completion a deny (the upstream failed);
// detail alone (client_closed, a cut body) is an error of an allowed
// request.
func (f *httpFlow) complete(status int, reason policy.Reason, detail string) {
	if f.completed {
		return
	}
	f.completed = true
	f.settleAtEnd()
	r := f.record(audit.KindHTTPDone)
	r.Status = status
	r.IP = f.ip
	r.BytesOut = f.sent.n.Load()
	if f.recv != nil {
		r.BytesIn = f.recv.n.Load()
	}
	r.DurationUS = time.Since(f.start).Microseconds()
	if reason == "" {
		reason, detail = f.leakCut(detail)
	}
	r.Error = detail
	if c := f.sent.cut.Load(); c != nil && reason == "" {
		// Stopped after the response began (a full-duplex stream).
		reason, r.Error = c.reason, c.detail
	}
	if reason != "" {
		r.Decision, r.Reason = audit.DecisionDeny, string(reason)
		f.s.metrics.decided(r.Kind, r.Decision, reason)
	}
	if err := f.s.appendFlow(&f.flowInfo, r); err != nil {
		f.s.failLog.Failed(err, zap.String("request", f.id))
	}
	f.s.countBytes(f.st.ids, f.identity.ID, r.BytesIn+r.BytesOut)
	freeRecord(r)
	f.release()
}

// release gives back what the request holds: its token reservation (when
// nothing settled it), its idle timer, its upstream context and its
// per-identity limit slot. It runs once the request is
// refused or complete; a second call releases nothing.
func (f *httpFlow) release() {
	if f.reserve != nil && !f.settled {
		// Refused after its reservation (credentials, a leak, the audit
		// log): nothing was sent, nothing spent.
		f.settled = true
		f.reserve.Release()
	}
	if f.idle != nil {
		f.idle.Stop()
		f.cancel()
	}
	if f.releaseLimit != nil {
		f.releaseLimit()
		f.releaseLimit = nil
	}
}

// serveNonProxy answers origin-form requests: egressd is not a web server.
func (s *Server) serveNonProxy(w http.ResponseWriter, r *http.Request) {
	f := &httpFlow{s: s, flowInfo: flowInfo{
		id: s.newRequestID(), kind: policy.KindHTTP, method: r.Method, via: audit.ViaProxy,
	}}
	f.setClient(r.RemoteAddr)
	f.target = claim{authority: r.Host, path: r.URL.EscapedPath(), query: r.URL.RawQuery}.target()
	s.sources.refused(f.client)
	rf := refusalOf(policy.ReasonNotProxyRequest)
	if err := s.auditDecision(&f.flowInfo, rf.verdict); err != nil {
		rf = refusalOf(policy.ReasonAuditUnavailable)
	}
	rf.serve(w, r, f.id)
}
