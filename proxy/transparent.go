package proxy

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/policy"
)

// GivenAddrs is what the transparent listener needs of *dnsguard.Given:
// whether egressd's DNS server gave client addr for name.
type GivenAddrs interface {
	Gave(client netip.Addr, name string, addr netip.Addr) bool
}

// ServeTransparent accepts on ln (proxy.transparent_listen) the
// connections the network redirects to egressd or its DNS steers there,
// until Shutdown. Each is decided as a CONNECT to the name its first
// flight carries — a ClientHello's SNI, an HTTP request's Host — on its
// original destination's port, and run by the same tunnel code
// (openTunnel), its records saying via "transparent". It returns
// http.ErrServerClosed after a Shutdown.
func (s *Server) ServeTransparent(ln net.Listener) error {
	return s.serveRaw(ln, "transparent", s.serveTransparent)
}

// serveTransparent learns one connection's original destination and reads
// its first flight, up to a whole ClientHello or HTTP request head within
// peek_timeout, for the name to decide; the flight is then the tunnel's
// early bytes, checked again by tunnel.firstFlight like a CONNECT's. A
// plain HTTP connection is a tunnel to Host's name whose every request is
// bound to that name (checkPlainFlight), so its rule must say
// "tls": false, as for a CONNECT carrying plain HTTP.
func (s *Server) serveTransparent(c *net.TCPConn, release func()) {
	opened := false
	defer func() {
		if !opened {
			c.Close()
			release()
		}
	}()
	start := time.Now()
	remote := c.RemoteAddr().String()
	a := &transparentArrival{client: clientAddr(remote), given: s.given}
	// A refusal before the decision still names the identity the source
	// maps to: the source is all this arrival identifies by, and a
	// reviewer filtering by identity must see it.
	refuse := func(authority string, rf refusal) {
		f := s.tunnelFlow(audit.ViaTransparent, remote, authority, start)
		if id, _, reason := a.identify(s.state.Load().ids, a.client); reason == "" {
			f.identity = id.ID
		}
		s.auditAndRefuseTunnel(f, c, a, rf)
	}
	dst, err := s.origDst(c)
	if err != nil {
		rf := deniedRefusal(policy.ReasonDestinationMismatch)
		rf.detail = err.Error()
		refuse("", rf)
		return
	}
	a.dst = dst
	a.own = slices.Contains(s.own, dst.Addr())
	c.SetReadDeadline(start.Add(s.cfg.PeekTimeout))
	flight, name, rf := s.readTransparentFlight(c, a)
	port := strconv.Itoa(int(destinationPort(c, dst, a.tls)))
	if rf != nil {
		refuse(net.JoinHostPort(cmp.Or(name, dst.Addr().String()), port), *rf)
		return
	}
	opened = true
	s.openTunnel(tunnelRequest{ctx: context.Background(), client: c, release: release, early: flight, remote: remote,
		authority: net.JoinHostPort(name, port), arrival: a, echNeedsInspection: true})
}

// destinationPort is the port the client meant to reach: the original
// destination's, unless the connection was not redirected in egressd's
// namespace and arrived at the listener itself (a DNAT in the sandbox's
// namespace, a Service's port mapping, DNS steering to the listener's
// port). Then the listener's port says nothing of it, and the protocol
// the first flight spoke does: 443 for TLS, 80 for plain HTTP.
func destinationPort(c net.Conn, dst netip.AddrPort, tls bool) uint16 {
	local, ok := c.LocalAddr().(*net.TCPAddr)
	if !ok || netip.AddrPortFrom(local.AddrPort().Addr().Unmap(), local.AddrPort().Port()) != dst {
		return dst.Port()
	}
	if tls {
		return 443
	}
	return 80
}

// readTransparentFlight reads the first flight and the name it carries: a
// ClientHello's server name (none is sni_required), or the Host of an
// HTTP request head of at most max_header_bytes. Anything else names
// nothing and is refused. It returns the bytes read, which the tunnel
// forwards after its own checks.
func (s *Server) readTransparentFlight(c io.Reader, a *transparentArrival) ([]byte, string, *refusal) {
	refused := func(reason policy.Reason, detail string) *refusal {
		rf := deniedRefusal(reason)
		rf.detail = detail
		return &rf
	}
	flight, err := readSome(make([]byte, 0, 4<<10), c)
	if len(flight) == 0 {
		return nil, "", refused(policy.ReasonMalformedRequest, "no first bytes")
	}
	if isTLSRecordStart(flight) {
		a.tls = true
		flight, h, reason, detail := readHello(flight, err, c)
		if reason != "" {
			return flight, "", refused(reason, detail)
		}
		if h.sni == "" {
			return flight, "", refused(policy.ReasonSNIRequired, "")
		}
		return flight, strings.ToLower(strings.TrimSuffix(h.sni, ".")), nil
	}
	// Each read searches only the bytes it added (and the three before
	// them, where an end could begin), so a head trickled a byte at a time
	// costs linear work.
	for from := 0; !bytes.Contains(flight[from:], []byte("\r\n\r\n")); {
		from = max(len(flight)-3, 0)
		if err != nil {
			return flight, "", refused(policy.ReasonMalformedRequest, "neither a ClientHello nor an HTTP request head: "+err.Error())
		}
		if len(flight) >= s.cfg.MaxHeaderBytes {
			return flight, "", refused(policy.ReasonHeadersTooLarge, "")
		}
		flight, err = readSome(flight, c)
	}
	req, rerr := http.ReadRequest(bufio.NewReader(bytes.NewReader(flight)))
	if rerr != nil {
		return flight, "", refused(policy.ReasonMalformedRequest, "neither a ClientHello nor an HTTP request head: "+rerr.Error())
	}
	a.http = true
	host, port := splitHostHeader(req.Host)
	// The tunnel compares each request's port as text with the original
	// destination's (checkPlainHost), so only the canonical form passes
	// here: "080" would be decided here and refused there.
	if n, err := strconv.ParseUint(port, 10, 16); port != "" && (err != nil || strconv.FormatUint(n, 10) != port) {
		return flight, "", refused(policy.ReasonMalformedRequest, "Host names no valid port: "+strconv.Quote(port[:min(len(port), 16)]))
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if host == "" {
		return flight, "", refused(policy.ReasonMalformedRequest, "request names no host")
	}
	return flight, host, nil
}

// transparentArrival is a connection the network sent to egressd without
// its client knowing: identified by its source address only (sources:),
// never by anything it sends; its target must agree with where it was
// going; a refusal is a TLS alert or an HTTP response, as its first
// flight spoke.
type transparentArrival struct {
	client netip.Addr
	// dst is the original destination; own, that it is one of egressd's
	// own addresses (DNS steering), where the name decides alone.
	dst   netip.AddrPort
	own   bool
	given GivenAddrs
	// tls or http: what the first flight was, once read.
	tls, http bool
}

func (*transparentArrival) via() string { return audit.ViaTransparent }

// identify maps the source address; anonymous when the table is empty.
func (a *transparentArrival) identify(ids *identity.Store, client netip.Addr) (policy.Identity, credential, policy.Reason) {
	if ids.AllAnonymous() {
		return identity.Anonymous, credential{source: client}, ""
	}
	return reauthenticate(ids, identity.Anonymous.ID, credential{source: client})
}

// vetTarget holds the name the policy allowed to where the client was
// going: the original destination must be an address egressd's DNS gave
// this client for that name (or the name's own address when the name is
// one), unless it is egressd's own address. A client that resolved a
// denied name itself, or sends an allowed SNI to another address, is
// refused.
func (a *transparentArrival) vetTarget(t Target, _ bool) (policy.Reason, string) {
	if a.own {
		return "", ""
	}
	dst := a.dst.Addr()
	if ip, err := netip.ParseAddr(t.Host); err == nil {
		if ip.Unmap() == dst {
			return "", ""
		}
	} else if a.given != nil && a.given.Gave(a.client, t.Host, dst) {
		return "", ""
	}
	return policy.ReasonDestinationMismatch, "original destination " + a.dst.String() + " was not given to this client for " + t.Host
}

// answerOpen writes nothing: the client believes it is connected already.
func (*transparentArrival) answerOpen(net.Conn) error { return nil }

// tlsAccessDenied is a fatal TLS alert record, access_denied (49).
var tlsAccessDenied = []byte{0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 49}

// answerRefused answers in the protocol the client spoke: a TLS
// access_denied alert, an HTTP refusal, or nothing.
func (a *transparentArrival) answerRefused(c net.Conn, f *flowInfo, rf refusal) error {
	switch {
	case a.tls:
		_, err := c.Write(tlsAccessDenied)
		return err
	case a.http:
		return rf.write(c, "", f.id)
	}
	return nil
}
