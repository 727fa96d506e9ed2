// Package proxy is the HTTP forward proxy and CONNECT tunnel that sandboxes
// set as HTTP_PROXY: every request is identified, decided by policy, dialled
// only to a vetted address, and audited before anything goes upstream.
//
// # The decision path
//
// Every entry point runs the same stages: client bytes → identity → facts →
// floor → policy → audit → act → completion record. These are the functions
// a request passes through, in order (TestDocMapNamesExist keeps each name
// true):
//
//	HTTP     proxy.Server.ServeHTTP → proxy.Server.onRequest → proxy.authenticate
//	         → policy.PreDial.DecideHTTP (policy.ParseHTTP; dnsguard.Floor.Check
//	           for an IP literal; policy.Engine.Decide)
//	         → proxy.httpFlow.prepareCredentials (broker.Prepare: the rule's
//	           credential actions, placeholders) → proxy.Server.decided
//	         → proxy.httpFlow.applyCredentials → proxy.httpFlow.RoundTrip
//	           (dnsguard.Dialer.DialContext vets every answer;
//	           proxy.httpFlow.sendInternal for a secret over plain HTTP)
//	         → proxy.httpFlow.scrubResponse (broker.Plan.Scrub)
//	         → proxy.httpFlow.complete ("http_done")
//	CONNECT  proxy.Server.ServeHTTP → proxy.Server.serveConnect
//	         → proxy.Server.connectHijack → proxy.authenticate
//	         → policy.PreDial.DecideConnect (policy.ParseConnect;
//	           dnsguard.Floor.Check; policy.Engine.Decide) → proxy.Server.decided
//	         → dnsguard.Dialer.DialContext → proxy.tunnel.run
//	           (proxy.tunnel.firstFlight; proxy.tunnel.checkPlainFlight
//	           binds every request of a plaintext tunnel to its host)
//	         → proxy.tunnel.done ("connect_done")
//	inspected CONNECT (the decision says inspect): … → proxy.Server.decided
//	         → proxy.Server.runTunnel → proxy.tunnel.serveInspected
//	           (proxy.tunnel.firstFlight: ClientHello, SNI, ECH;
//	           proxy.LeafSource.Leaf; the TLS handshake)
//	         → proxy.tunnel.serveInner (HTTP/1.1 or h2) → per request
//	           proxy.tunnel.serveInnerRequest → the HTTP path from
//	           proxy.Server.onRequest, deciding with
//	           policy.PreDial.DecideInspected and sending upstream over TLS
//	           (proxy.tlsTransports.get) → proxy.tunnel.finish ("connect_done")
//	DNS      dnsguard.Server.ServeDNS → dnsguard.Server.handle
//	         → dnsguard.Server.decide (identity by source address)
//	         → dnsguard.Decide (dnsguard.NewFacts; policy.Engine.Decide)
//	         → dnsguard.Resolver.resolve (every answer vetted by the floor)
//	         → audit.Appender.Append → the reply (its record is the completion)
//	SQL      pggate.Gate.serveConn → pggate.Gate.login (SCRAM: identity)
//	         → pggate.session.decideConnect → pggate.session.handle
//	         → pggate.session.decide → pggate.Gate.verdict (pggate.verdictCache
//	           by exact text, then shape; pggate.Gate.capped: the statement cap)
//	         → pggate.Gate.evaluate (sqlfacts.PrescanTokens; the normalized
//	           form's cached verdict; sqlfacts.ParseContext;
//	           policy.Engine.Decide per statement)
//	         → audit.Appender.Append per statement → upstream, or 42501
//	           (the upstream was dialled at login by dnsguard.Dialer.DialContext)
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
// https:// URL of an inspected host), dnsguard.Decide and
// pggate.DecideQuery, the same functions, so a check answers what the
// listeners would do.
package proxy
