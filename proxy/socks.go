package proxy

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/socks5"
)

// ServeSOCKS accepts SOCKS5 clients on ln (proxy.socks_listen) until
// Shutdown: each CONNECT request is a tunnel decided, audited and run as a
// CONNECT to the same host:port (openTunnel), its records saying via
// "socks". It returns http.ErrServerClosed after a Shutdown.
func (s *Server) ServeSOCKS(ln net.Listener) error {
	return s.serveRaw(ln, "socks", s.serveSOCKS)
}

// serveSOCKS reads one client's handshake — greeting, RFC 1929
// credentials when it chose them, request — within read_header_timeout,
// and opens the tunnel it asks for. A name is resolved by egressd
// (socks5h); an address the client resolved itself is decided as an IP
// literal. What the handshake refuses is audited as a CONNECT refusal.
func (s *Server) serveSOCKS(c *net.TCPConn, release func()) {
	opened := false
	defer func() {
		if !opened {
			c.Close()
			release()
		}
	}()
	start := time.Now()
	remote := c.RemoteAddr().String()
	c.SetDeadline(start.Add(s.cfg.ReadHeaderTimeout))
	refuse := func(a *socksArrival, authority string, rf refusal) {
		f := s.tunnelFlow(audit.ViaSOCKS, remote, authority, start)
		f.user = a.user
		if rf.Reason.Class() == policy.ClassIdentity {
			s.sources.refused(f.client)
		}
		s.auditAndRefuseTunnel(f, c, a, rf)
	}
	a := &socksArrival{}
	g, err := socks5.ReadGreeting(c)
	if err != nil {
		a.phase = socksDone
		refuse(a, "", socksMalformed(err))
		return
	}
	if s.sources.exhausted(clientAddr(remote)) {
		// Before any credential is checked: a client guessing tokens
		// is refused per source, as on the proxy listener.
		a.phase = socksGreeting
		refuse(a, "", refusalOf(policy.ReasonSourceRateLimited))
		return
	}
	anonymous := s.state.Load().ids.AllAnonymous()
	switch {
	case g.Offers(socks5.MethodUserPass) && !(anonymous && g.Offers(socks5.MethodNoAuth)):
		if socks5.WriteMethod(c, socks5.MethodUserPass) != nil {
			return
		}
		creds, err := socks5.ReadCredentials(c)
		if err != nil {
			a.phase = socksDone
			refuse(a, "", socksMalformed(err))
			return
		}
		a.basic, a.user, a.tokenSum = true, creds.User, sha256.Sum256([]byte(creds.Password))
		// RFC 1929 answers the credentials before the request: a wrong
		// one is refused now, with no target yet to record.
		a.phase = socksAuth
		if _, _, reason := a.identify(s.state.Load().ids, clientAddr(remote)); reason != "" {
			refuse(a, "", deniedRefusal(reason))
			return
		}
		if socks5.WriteAuthStatus(c, true) != nil {
			return
		}
	case g.Offers(socks5.MethodNoAuth):
		if socks5.WriteMethod(c, socks5.MethodNoAuth) != nil {
			return
		}
	default:
		a.phase = socksGreeting
		refuse(a, "", deniedRefusal(policy.ReasonProxyAuthRequired))
		return
	}
	a.phase = socksRequest
	q, err := socks5.ReadRequest(c)
	if err != nil {
		if errors.Is(err, socks5.ErrAddressType) {
			a.reply = socks5.ReplyAddressTypeNotSupported
		} else {
			a.phase = socksDone
		}
		refuse(a, "", socksMalformed(err))
		return
	}
	if q.Command != socks5.CommandConnect {
		rf := deniedRefusal(policy.ReasonUnsupportedCommand)
		rf.detail = "socks5 command " + socksCommandName(q.Command)
		refuse(a, q.Authority(), rf)
		return
	}
	opened = true
	s.openTunnel(tunnelRequest{ctx: context.Background(), client: c, release: release, remote: remote,
		authority: q.Authority(), arrival: a})
}

// socksMalformed is the refusal of a handshake that did not parse.
func socksMalformed(err error) refusal {
	rf := deniedRefusal(policy.ReasonMalformedRequest)
	rf.detail = err.Error()
	return rf
}

func socksCommandName(c socks5.Command) string {
	switch c {
	case socks5.CommandBind:
		return "BIND"
	case socks5.CommandUDPAssociate:
		return "UDP ASSOCIATE"
	}
	return fmt.Sprintf("0x%02x", byte(c))
}

// socksPhase is how far a SOCKS5 handshake got: what a refusal is
// answered with.
type socksPhase uint8

const (
	// socksDone: the handshake broke; nothing can be answered.
	socksDone socksPhase = iota
	// socksGreeting: no offered method is acceptable.
	socksGreeting
	// socksAuth: the credentials are answered.
	socksAuth
	// socksRequest: the request is answered with a reply code.
	socksRequest
)

// socksArrival is a SOCKS5 client: identified by its RFC 1929 username and
// password (the identity's name and token, as in Proxy-Authorization's
// Basic) or by its source, answered with SOCKS5 replies.
type socksArrival struct {
	phase socksPhase
	// reply, when not zero, is the refusal's reply code, whatever its
	// reason (an address type the parser does not know).
	reply    socks5.Reply
	basic    bool
	user     string
	tokenSum [sha256.Size]byte
}

func (*socksArrival) via() string { return audit.ViaSOCKS }

// identify is authenticate's rule for what SOCKS5 carries: credentials
// when the client chose them (wrong ones never fall back to the source),
// else the source mapping, else anonymous when the table is empty.
func (a *socksArrival) identify(ids *identity.Store, client netip.Addr) (policy.Identity, credential, policy.Reason) {
	cred := credential{source: client}
	if ids.AllAnonymous() {
		return identity.Anonymous, cred, ""
	}
	if a.basic {
		cred.tokenSum, cred.basic, cred.user = a.tokenSum, true, a.user
		id, ok := ids.AuthenticateSum(a.user, a.tokenSum)
		if !ok {
			return policy.Identity{}, cred, policy.ReasonProxyAuthInvalid
		}
		return id, cred, ""
	}
	return reauthenticate(ids, identity.Anonymous.ID, cred)
}

// vetTarget has nothing to add: the request names its target, and the
// first flight is checked against it.
func (*socksArrival) vetTarget(Target, bool) (policy.Reason, string) { return "", "" }

func (a *socksArrival) answerOpen(c net.Conn) error {
	return socks5.WriteReply(c, socks5.ReplySucceeded)
}

// answerRefused answers in the handshake's phase: no acceptable method,
// failed credentials, or the reply code closest to the refusal's reason.
func (a *socksArrival) answerRefused(c net.Conn, _ *flowInfo, rf refusal) error {
	switch a.phase {
	case socksGreeting:
		return socks5.WriteMethod(c, socks5.MethodNoAcceptable)
	case socksAuth:
		return socks5.WriteAuthStatus(c, false)
	case socksRequest:
		if a.reply != socks5.ReplySucceeded {
			return socks5.WriteReply(c, a.reply)
		}
		return socks5.WriteReply(c, socksReply(rf.Reason))
	}
	return errors.New("socks5: handshake broken, nothing to answer")
}

// socksReply is the SOCKS5 reply code of a refusal: "not allowed by
// ruleset" for what the policy, the floor or the identity refused, the
// network's codes for a dial that failed, and a general failure for
// limits and egressd's own state.
func socksReply(r policy.Reason) socks5.Reply {
	switch r {
	case policy.ReasonUnsupportedCommand:
		return socks5.ReplyCommandNotSupported
	case policy.ReasonDNSFailure, policy.ReasonDNSNXDomain, policy.ReasonDNSNoAddress, policy.ReasonUpstreamTimeout:
		return socks5.ReplyHostUnreachable
	case policy.ReasonUpstreamUnreachable:
		return socks5.ReplyConnectionRefused
	}
	switch r.Class() {
	case policy.ClassPolicy, policy.ClassIdentity, policy.ClassMalformed:
		return socks5.ReplyNotAllowed
	}
	return socks5.ReplyGeneralFailure
}
