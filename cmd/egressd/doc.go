// Command egressd is the single edge that terminates all sandbox egress:
// `egressd serve` runs the proxy listener (HTTP and CONNECT, inspected or
// not), the DNS listener and the Postgres gate side by side, over one
// policy, one identity table and one audit log; the other subcommands
// check, inspect and set them up. The work lives in the packages.
//
// # The decision paths
//
// The five paths meet here, each from its listener to its completion
// record. Every entry point runs the same stages: client bytes → identity
// → facts → floor → policy → audit → act → completion record. These are the
// functions each passes through, in order; a name in parentheses is called
// by the step before it, and TestDocMap holds each step to the calls it
// follows (internal/docmap says how). The proxy's package doc maps its
// three paths hop by hop, goproxy's hops included.
//
//	HTTP      proxy.Server.Serve → http.Server.Serve → proxy.Server.ServeHTTP
//	          → goproxy.ProxyHttpServer.ServeHTTP → proxy.Server.onRequest
//	          → proxy.authenticate → policy.PreDial.DecideHTTP
//	            (policy.ParseHTTP; dnsguard.Floor.Check; policy.Engine.Decide)
//	          → proxy.Server.auditDecision → proxy.httpFlow.RoundTrip
//	          → proxy.responseBody.Close → proxy.httpFlow.complete ("http_done")
//	CONNECT   proxy.Server.Serve → http.Server.Serve → proxy.Server.ServeHTTP
//	          → proxy.Server.connectHijack → proxy.authenticate
//	          → policy.PreDial.DecideConnect (policy.ParseConnect;
//	            dnsguard.Floor.Check; policy.Engine.Decide)
//	          → proxy.Server.auditDecision → dnsguard.Dialer.DialContext
//	          → proxy.tunnel.start → proxy.direction.run
//	            (proxy.tunnel.firstFlight)
//	          → proxy.tunnel.completeRun ("connect_done")
//	inspected proxy.Server.connectHijack, the decision saying inspect
//	          → proxy.tunnel.serveInspected (proxy.LeafSource.Leaf)
//	          → proxy.tunnel.serveInner → goproxy.ProxyHttpServer.ServeHTTP
//	          → proxy.Server.onRequest → policy.PreDial.DecideInspected
//	          → proxy.Server.auditDecision → proxy.httpFlow.RoundTrip
//	          → proxy.httpFlow.complete ("http_done")
//	          → proxy.tunnel.completeRun ("connect_done")
//	DNS       dnsguard.Server.Serve → dns.Server.ActivateAndServe
//	          → dnsguard.Server.ServeDNS → dnsguard.Server.handle
//	          → dnsguard.Server.decide (identity by source address)
//	          → dnsguard.Decide (dnsguard.NewFacts; policy.Engine.Decide)
//	          → dnsguard.Resolver.resolve, every answer vetted by the floor
//	          → audit.Appender.Append (its record is the completion)
//	          → dns.ResponseWriter.WriteMsg, the reply
//	SQL       pggate.Gate.Serve → pggate.Gate.serveConn
//	          → pggate.Gate.login (SCRAM: the identity; the upstream login
//	            through the pinned dialer, the gate's Dial)
//	          → pggate.session.decideConnect → pggate.session.handle
//	          → pggate.session.decide → pggate.Gate.verdict (the exact-text
//	            cache) → pggate.Gate.capped (the shape cache, the statement
//	            cap) → pggate.Gate.evaluate (the normalized cache)
//	          → sqlfacts.ParseContext → policy.Engine.Decide per statement
//	          → audit.Appender.Append per statement, then the statement goes
//	            upstream or is refused with 42501
//
// `egressd check` calls policy.PreDial (policy.PreDial.DecideRequest for an
// https:// URL of an inspected host), dnsguard.Decide and
// pggate.DecideQuery (pggate.Gate.verdict), the same functions, so a check answers what the
// listeners would do. A single check, each line of `check --batch` and each
// line of the admin listener's POST /v1/check (`check --server`) go through
// one function, decideRequest, to those calls.
package main
