package proxy

import (
	"net"
	"net/http"
	"net/netip"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/policy"
)

// arrival is what differs between the listeners a tunnel can arrive on:
// how its client is identified, what the tunnel's target must also agree
// with, and how the client is told the tunnel is open or refused. The rest
// — decide, audit, dial, first flight, tunnel — is openTunnel's, the same
// for every arrival.
type arrival interface {
	// via is the records' audit.Via.
	via() string
	// identify names the client at address client from what it proved.
	identify(ids *identity.Store, client netip.Addr) (policy.Identity, credential, policy.Reason)
	// vetTarget checks an allowed target against what the arrival knows
	// of it besides its name (inspected: the rule terminates TLS); it
	// returns the refusal reason and its detail, or "".
	vetTarget(target Target, inspected bool) (policy.Reason, string)
	// answerOpen tells the client its tunnel is open.
	answerOpen(c net.Conn) error
	// answerRefused tells the client its tunnel is refused; the caller
	// closes c next.
	answerRefused(c net.Conn, f *flowInfo, rf refusal) error
}

// connectArrival is a CONNECT on the proxy listener: identified by its
// Proxy-Authorization or its source, answered in HTTP.
type connectArrival struct{ r *http.Request }

func (connectArrival) via() string { return audit.ViaProxy }

func (a connectArrival) identify(ids *identity.Store, client netip.Addr) (policy.Identity, credential, policy.Reason) {
	return authenticate(ids, a.r, client)
}

// vetTarget has nothing to add: the CONNECT names its target, and the
// first flight is checked against it (tunnel.firstFlight).
func (connectArrival) vetTarget(Target, bool) (policy.Reason, string) { return "", "" }

func (connectArrival) answerOpen(c net.Conn) error {
	_, err := c.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
	return err
}

// answerRefused writes the refusal as an HTTP response, in the form the
// CONNECT's Accept asked for.
func (a connectArrival) answerRefused(c net.Conn, f *flowInfo, rf refusal) error {
	return rf.write(c, acceptOf(a.r), f.id)
}
