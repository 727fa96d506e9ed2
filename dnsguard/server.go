package dnsguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap"
	"golang.org/x/net/netutil"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/internal/metrics"
	"github.com/egressd/egressd/policy"
)

// ServerOptions are the server's dependencies.
type ServerOptions struct {
	Config   Config
	Decider  policy.Decider
	Resolver *Resolver
	Audit    audit.Appender
	// Identities map a client address to its sandbox by their sources. If
	// nil or empty, every client is "anonymous"; a client no source covers
	// is refused (unknown_client).
	Identities *identity.Store
	Log        *zap.Logger
	// Given remembers the addresses each client was given, for the
	// transparent listener's check of original destinations. If nil,
	// nothing is remembered.
	Given *Given
	// Decisions counts the queries refused before they are audited
	// (rate_limited); audited ones are counted by the Audit appender
	// (metrics.Counting). If nil, they are not counted.
	Decisions *metrics.Decisions
}

// Server is the DNS listener sandboxes use as their resolver. It answers
// only names egress.dns allows, only with addresses the floor allows, and
// answers everything else itself: a refused name is never forwarded, since
// forwarding alone would leak it to the attacker's nameserver.
type Server struct {
	cfg    Config
	state  atomic.Pointer[serverState]
	res    *Resolver
	audit  audit.Appender
	log    *zap.Logger
	limits *limiter
	refuse int

	// failLog reports failed appends at most once per interval: while
	// the audit disk is full every query fails its append.
	failLog *audit.FailLog
	// decisions counts the refusals that are not audited; nil counts none.
	decisions *metrics.Decisions
	// given remembers the answers; nil remembers none.
	given *Given
	// steer, when valid, is the address steered answers carry.
	steer netip.Addr
}

// serverState is what a reload swaps: the policy and the identities.
type serverState struct {
	decider  policy.Decider
	identify func(netip.Addr) (policy.Identity, bool)
}

// NewServer builds a server; it listens only once Serve or ListenAndServe
// is called.
func NewServer(o ServerOptions) (*Server, error) {
	if o.Decider == nil || o.Resolver == nil || o.Audit == nil || o.Log == nil {
		return nil, errors.New("new dns server: decider, resolver, audit and log are required")
	}
	cfg := o.Config
	cfg.Provision()
	refuse := dns.RcodeRefused
	if cfg.Refuse == "nxdomain" {
		refuse = dns.RcodeNameError
	}
	s := &Server{
		cfg:    cfg,
		res:    o.Resolver,
		audit:  o.Audit,
		log:    o.Log.Named("dnsguard"),
		limits: newLimiter(cfg.RateLimit, cfg.Burst),
		refuse: refuse,
	}
	s.failLog = audit.NewFailLog(s.log, 0)
	s.decisions = o.Decisions
	s.given = o.Given
	if cfg.SteerTo != "" {
		s.steer, _ = netip.ParseAddr(cfg.SteerTo) // Validate checked it
	}
	s.Reload(o.Decider, o.Identities)
	return s, nil
}

// Reload swaps the decider and the identity mapping atomically: queries in
// flight finish with the old ones. With no identities every client is
// "anonymous"; otherwise an unmapped source is refused.
func (s *Server) Reload(d policy.Decider, ids *identity.Store) {
	identify := func(netip.Addr) (policy.Identity, bool) { return identity.Anonymous, true }
	if !ids.AllAnonymous() {
		identify = ids.BySource
		if !ids.HasSources() {
			// Tokens and SCRAM verifiers cannot name a DNS client: with
			// no sources, every query would be refused.
			s.log.Warn("dns.listen is set but no identity lists sources: the DNS listener identifies a client by its "+
				"source address only, so every query will be refused unknown_client; add the sandboxes' CIDR "+
				"to their identity's sources",
				zap.Int("identities", ids.Len()))
		}
	}
	s.state.Store(&serverState{decider: d, identify: identify})
}

// acceptQuery is stricter than miekg's default, which lets NOTIFY through:
// only a plain query with one question and at most an OPT record.
func acceptQuery(dh dns.Header) dns.MsgAcceptAction {
	const qr = 1 << 15
	if dh.Bits&qr != 0 {
		return dns.MsgIgnore
	}
	if opcode := int(dh.Bits>>11) & 0xf; opcode != dns.OpcodeQuery {
		return dns.MsgRejectNotImplemented
	}
	if dh.Qdcount != 1 || dh.Ancount != 0 || dh.Nscount != 0 || dh.Arcount > 1 {
		return dns.MsgReject
	}
	return dns.MsgAccept
}

// maxTCPConns bounds concurrent TCP clients; each is also bounded in time
// (read and idle timeouts) and in queries per connection.
const maxTCPConns = 256

// Serve answers on pc and ln until ctx ends, then shuts both down.
func (s *Server) Serve(ctx context.Context, pc net.PacketConn, ln net.Listener) error {
	ln = netutil.LimitListener(ln, maxTCPConns)
	servers := []*dns.Server{
		{PacketConn: pc, Handler: s, MsgAcceptFunc: acceptQuery, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, UDPSize: ednsSize},
		{Listener: ln, Handler: s, MsgAcceptFunc: acceptQuery, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, MaxTCPQueries: 128, IdleTimeout: func() time.Duration { return 10 * time.Second }},
	}
	// A Shutdown that comes before its server has started is a no-op, and
	// the server would then serve on after Serve returned: shut each down
	// only once it has started, or not at all once it has ended.
	started := make([]chan struct{}, len(servers))
	ended := make([]chan struct{}, len(servers))
	errc := make(chan error, len(servers))
	for i, srv := range servers {
		started[i], ended[i] = make(chan struct{}), make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started[i]) }
		go func() {
			defer close(ended[i])
			errc <- srv.ActivateAndServe()
		}()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i, srv := range servers {
		select {
		case <-started[i]:
			// The first error is the one worth returning.
			_ = srv.ShutdownContext(sctx)
			<-ended[i]
		case <-ended[i]:
		}
	}
	if err != nil {
		return fmt.Errorf("dns serve: %w", err)
	}
	return nil
}

// ServeDNS implements dns.Handler.
func (s *Server) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	client, udp := clientAddr(w.RemoteAddr())
	ctx, cancel := context.WithTimeout(context.Background(), s.res.budget)
	defer cancel()
	resp := s.handle(ctx, client, req)
	if udp {
		resp.Truncate(udpLimit(req))
	}
	if err := w.WriteMsg(resp); err != nil {
		if ce := s.log.Check(zap.DebugLevel, "write dns answer"); ce != nil {
			ce.Write(zap.Stringer("client", client), zap.Error(err))
		}
	}
}

func clientAddr(a net.Addr) (netip.Addr, bool) {
	switch v := a.(type) {
	case *net.UDPAddr:
		return v.AddrPort().Addr().Unmap(), true
	case *net.TCPAddr:
		return v.AddrPort().Addr().Unmap(), false
	}
	return netip.Addr{}, false
}

// udpLimit is the largest UDP answer the client accepts: 512 bytes, or its
// EDNS size up to ours.
func udpLimit(req *dns.Msg) int {
	if opt := req.IsEdns0(); opt != nil {
		return int(min(max(opt.UDPSize(), dns.MinMsgSize), ednsSize))
	}
	return dns.MinMsgSize
}
