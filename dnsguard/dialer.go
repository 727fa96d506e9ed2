package dnsguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"github.com/egressd/egressd/policy"
)

// Dialer dials only addresses the floor has vetted. It resolves a name once
// through the Resolver, checks every address with the port, and connects to
// those IPs itself: handing the name to a library that resolves again would
// let a rebinding answer through.
type Dialer struct {
	r     *Resolver
	floor *Floor
	net   net.Dialer
}

// NewDialer builds a dialer; timeout bounds each connection attempt (if
// zero, 10s is used).
func NewDialer(r *Resolver, floor *Floor, timeout time.Duration) *Dialer {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	d := &Dialer{r: r, floor: floor}
	d.net = net.Dialer{
		Timeout: timeout,
		// The last line of defence: whatever address the socket is about
		// to connect to passes the floor again.
		ControlContext: d.control,
	}
	return d
}

// DialContext connects to address ("host:port") over tcp, tcp4 or tcp6. It
// tries the vetted addresses in answer order and returns the first
// connection; a deny is a *policy.DenyError and nothing is dialled.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, fmt.Errorf("dial %s %s: unsupported network", network, address)
	}
	addrs, port, err := d.Vet(ctx, address)
	if err != nil {
		return nil, err
	}
	var errs []error
	tried := 0
	for _, a := range addrs {
		if (network == "tcp4" && !a.Is4()) || (network == "tcp6" && !a.Is6()) {
			continue
		}
		tried++
		c, err := d.net.DialContext(ctx, network, netip.AddrPortFrom(a, port).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if tried == 0 {
		return nil, &policy.DenyError{Reason: policy.ReasonDNSNoAddress, Detail: fmt.Sprintf("%s has no %s address", address, network)}
	}
	return nil, fmt.Errorf("dial %s: %w", address, errors.Join(errs...))
}

// Vet resolves address ("host:port") and checks every address with the
// port, returning what may be dialled. Callers that dial themselves must use
// exactly these addresses.
func (d *Dialer) Vet(ctx context.Context, address string) ([]netip.Addr, uint16, error) {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, 0, &policy.DenyError{Reason: policy.ReasonMalformedAddress, Detail: strconv.Quote(address), Err: err}
	}
	p, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || p == 0 {
		return nil, 0, &policy.DenyError{Reason: policy.ReasonInvalidPort, Detail: strconv.Quote(address)}
	}
	port := uint16(p)
	addrs, err := d.r.Resolve(ctx, host)
	if err != nil {
		return nil, 0, err
	}
	for _, a := range addrs {
		if err := d.floor.Check(a, port); err != nil {
			return nil, 0, err
		}
	}
	return addrs, port, nil
}

// control re-checks the socket's destination just before connect.
func (d *Dialer) control(_ context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &policy.DenyError{Reason: policy.ReasonMalformedAddress, Detail: strconv.Quote(address), Err: err}
	}
	return d.floor.Check(ap.Addr(), ap.Port())
}
