// Package proxy is the HTTP forward proxy and CONNECT tunnel that sandboxes
// set as HTTP_PROXY, with two more ways in for clients that ignore it: a
// SOCKS5 listener and a transparent listener for connections the network
// redirects (or egressd's DNS steers) to egressd. Every request is
// identified, decided by policy, dialled only to a vetted address, and
// audited before anything goes upstream.
//
// # The decision paths
//
// Every entry point runs the same stages: client bytes → identity → facts →
// floor → policy → audit → act → completion record. These are the functions
// a request of the proxy listener passes through, in order, goproxy's hops
// included; a name in parentheses is called by the step before it
// (TestDocMap holds each step to the calls it follows, with
// internal/docmap). cmd/egressd's package doc maps all five paths, the
// DNS and SQL listeners' too.
//
//	HTTP     proxy.Server.ServeHTTP → goproxy.ProxyHttpServer.ServeHTTP
//	         → proxy.Server.onRequest (a hook New registers)
//	         → proxy.authenticate
//	         → policy.PreDial.DecideHTTP (policy.ParseHTTP; the body read
//	           and parsed where a rule decides on it, policy.Engine.NeedBody;
//	           dnsguard.Floor.Check for an IP literal; policy.Engine.Decide)
//	         → proxy.httpFlow.checkSize (the rule's max_request_bytes)
//	         → proxy.httpFlow.prepareModel (a model rule's clamp, usage and
//	           token budget)
//	         → proxy.httpFlow.prepareCredentials (broker.Prepare: the rule's
//	           credential actions, placeholders)
//	         → proxy.httpFlow.checkLeaks (broker.RequestScan.Head: secret
//	           values and patterns in the head as the sandbox sent it)
//	         → proxy.Server.auditDecision
//	         → proxy.httpFlow.applyCredentials
//	         → proxy.httpFlow.RoundTrip, which goproxy calls as the request's
//	           RoundTripper (proxy.upstreamPool.roundTrip, or net/http's
//	           Transport, each dialling through the pinned dialer;
//	           proxy.httpFlow.sendInternal for a secret over plain HTTP)
//	         → proxy.httpFlow.filterAnswer (an MCP answer's tools filtered, a
//	           model answer's usage read)
//	         → proxy.httpFlow.scrubResponse (broker.Plan.Scrub)
//	         → proxy.responseBody.WriteTo, goproxy copying the response
//	         → proxy.responseBody.Close, goproxy done with it
//	         → proxy.httpFlow.complete ("http_done")
//	CONNECT  proxy.Server.ServeHTTP → proxy.Server.serveConnect
//	         → proxy.Server.connectHijack → proxy.Server.openTunnel
//	         → proxy.connectArrival.identify (proxy.authenticate)
//	         → policy.PreDial.DecideConnect (policy.ParseConnect;
//	           dnsguard.Floor.Check; policy.Engine.Decide)
//	         → proxy.Server.auditDecision → dnsguard.Dialer.DialContext
//	         → proxy.Server.beginTunnel (proxy.connectArrival.answerOpen:
//	           the 200) → proxy.tunnel.start (proxy.tunnel.park while
//	           idle) → proxy.direction.run
//	         → proxy.tunnel.firstFlight (proxy.readHello;
//	           proxy.tunnel.checkPlainFlight binds every request of a
//	           plaintext tunnel to its host)
//	         → proxy.tunnel.completeRun ("connect_done")
//	SOCKS    proxy.Server.ServeSOCKS → proxy.Server.serveRaw
//	         → proxy.Server.serveSOCKS (socks5.ReadGreeting;
//	           socks5.ReadCredentials; socks5.ReadRequest)
//	         → proxy.Server.openTunnel → proxy.socksArrival.identify
//	         → policy.PreDial.DecideConnect
//	         → proxy.Server.auditDecision → dnsguard.Dialer.DialContext
//	         → proxy.Server.beginTunnel (proxy.socksArrival.answerOpen: reply
//	           succeeded) → proxy.tunnel.start → proxy.direction.run
//	         → proxy.tunnel.firstFlight
//	         → proxy.tunnel.completeRun ("connect_done")
//	transparent proxy.Server.ServeTransparent → proxy.Server.serveRaw
//	         → proxy.Server.serveTransparent
//	         → proxy.Server.readTransparentFlight (proxy.readHello: the
//	           SNI; or an HTTP head's Host)
//	         → proxy.Server.openTunnel → proxy.transparentArrival.identify
//	         → policy.PreDial.DecideConnect
//	         → proxy.transparentArrival.vetTarget (dnsguard.Given.Gave)
//	         → proxy.Server.auditDecision → dnsguard.Dialer.DialContext
//	         → proxy.Server.beginTunnel → proxy.tunnel.start
//	         → proxy.direction.run → proxy.tunnel.firstFlight
//	         → proxy.tunnel.completeRun
//	           ("connect_done")
//	inspected proxy.Server.openTunnel, the decision saying inspect
//	         → proxy.Server.auditDecision
//	         → proxy.Server.beginTunnel → proxy.tunnel.serveInspected
//	           (proxy.tunnel.firstFlight: ClientHello, SNI, ECH;
//	           proxy.LeafSource.Leaf; the TLS handshake)
//	         → proxy.tunnel.serveInner (HTTP/1.1 or h2) → per request
//	           proxy.tunnel.serveInnerRequest
//	         → goproxy.ProxyHttpServer.ServeHTTP → the HTTP path from
//	           proxy.Server.onRequest on
//	         → policy.PreDial.DecideInspected → proxy.Server.auditDecision
//	         → proxy.httpFlow.RoundTrip, sending upstream over TLS
//	           (proxy.tlsTransports.get; proxy.tlsUpstream.roundTrip)
//	         → proxy.responseBody.Close → proxy.httpFlow.complete ("http_done")
//	         → proxy.tunnel.completeRun ("connect_done")
//
// The three tunnel rows share one implementation from
// proxy.Server.openTunnel on: decide → audit → dial → first flight →
// tunnel, and an inspected rule's termination (the inspected row) for any
// of them. What differs is the arrival (proxy.connectArrival,
// proxy.socksArrival, proxy.transparentArrival): how the target and the
// identity are obtained — the CONNECT's authority and Proxy-Authorization;
// the SOCKS5 request and RFC 1929 credentials (the identity's name and
// token), or the source; the first flight's SNI or Host on the original
// destination's port (SO_ORIGINAL_DST, else the local address under
// TPROXY), and the source only — what else a target must agree with
// (vetTarget: a transparent connection's original destination must be
// an address egressd's DNS gave that client for the name, unless it is
// egressd's own), and how the client is answered (HTTP 200/403; SOCKS5
// reply codes; nothing, or a TLS access_denied alert or an HTTP
// refusal). A transparent connection carrying plain HTTP is a tunnel to
// its Host whose every request is bound to that host, as a plaintext
// CONNECT is, so its rule must say "tls": false; an ECH extension (GREASE
// included) on it is refused unless the rule inspects, since without
// termination the SNI is the only name egressd sees.
//
// # Vocabulary
//
// One verb per act, the same in every file: audit… appends a decision
// record and answers nothing (proxy.Server.auditDecision;
// proxy.tunnel.auditFlightRefusal, whose client already has its 200);
// respondRefused… answers a refusal whose record is appended already, or
// whose append failed, which the refusal then says; auditAndRefuse… does
// both. complete… appends a flow's completion record
// (proxy.httpFlow.complete, proxy.tunnel.complete;
// proxy.tunnel.completeRun says how a tunnel that ran ended), and release
// gives back what a request holds: the per-identity slot
// proxy.limiter.acquire took, and its timers (proxy.httpFlow.release,
// which complete calls).
//
// # Upstream connections
//
// No request reaches an upstream without its record, and no identity's
// bytes reach another's: an upstream connection that carried a request
// body is not reused unless the protocol frames the body (h2), since an
// upstream that answers without reading a body runs it as the next
// request; connections are pooled per identity, plain (proxy.upstreamPool)
// and inspected (proxy.tlsUpstream.roundTrip) alike; a request carrying a
// brokered secret never shares an HTTP/1.x connection; a connection that
// sent bytes past a response, or answered a HEAD, 204 or 304 declaring a
// body, is closed; and the upstream request is built, not copied, from the
// client's (proxy.httpFlow.upstreamRequest), so the client's connection
// handling stays on its hop.
//
// `egressd check` calls policy.PreDial (policy.PreDial.DecideRequest for an
// https:// URL of an inspected host), the same functions, so a check
// answers what the listener would do.
package proxy
