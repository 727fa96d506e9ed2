package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"

	"go.uber.org/zap"

	"github.com/egressd/egressd/cmd/egressd/config"
	"github.com/egressd/egressd/dnsguard"
	"github.com/egressd/egressd/internal/fdlimit"
)

// bound are the daemon's listeners, bound together before any serves: the
// proxy and admin always, the others when configured (nil otherwise).
type bound struct {
	proxy, admin net.Listener
	// socks and transparent are the proxy's other arrivals.
	socks, transparent net.Listener
	gate               net.Listener
	dnsPC              net.PacketConn
	dnsLn              net.Listener
	metrics            net.Listener
}

// closers are what a start has opened so far, closed together when a
// later step fails.
type closers []io.Closer

func (cs closers) close() error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// bind binds every configured listener. DNS binds here with the others,
// so that a port in use fails the start before anything is announced as
// serving. On the first failure what was bound is closed.
func (d *daemon) bind() (_ *bound, err error) {
	var opened closers
	defer func() {
		if err != nil {
			// The listen error is the one to report; a close error of a
			// listener that never served says nothing more.
			_ = opened.close()
		}
	}()
	tcp := func(name, addr string) (net.Listener, error) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("%s listen: %w", name, err)
		}
		opened = append(opened, ln)
		return ln, nil
	}
	var b bound
	if b.proxy, err = tcp("proxy", d.cfg.Proxy.Listen); err != nil {
		return nil, err
	}
	if b.admin, err = tcp("admin", d.cfg.Admin.Listen); err != nil {
		return nil, err
	}
	if d.cfg.Proxy.SOCKSListen != "" {
		if b.socks, err = tcp("socks", d.cfg.Proxy.SOCKSListen); err != nil {
			return nil, err
		}
	}
	if d.cfg.Proxy.TransparentListen != "" {
		if b.transparent, err = listenTransparent(d.cfg.Proxy.TransparentListen, d.log); err != nil {
			return nil, fmt.Errorf("transparent listen: %w", err)
		}
		opened = append(opened, b.transparent)
	}
	if d.gate != nil {
		if b.gate, err = tcp("postgres", d.cfg.Postgres.Listen); err != nil {
			return nil, err
		}
		if d.fds != nil {
			b.gate = &fdlimit.Listener{Listener: b.gate, Raw: b.gate.(*net.TCPListener), Budget: d.fds, Name: "postgres", Audit: d.audit, Log: d.log}
		}
	}
	if d.dns != nil {
		if b.dnsPC, err = net.ListenPacket("udp", d.cfg.DNS.Listen); err != nil {
			return nil, fmt.Errorf("dns listen: %w", err)
		}
		opened = append(opened, b.dnsPC)
		if b.dnsLn, err = tcp("dns", d.cfg.DNS.Listen); err != nil {
			return nil, err
		}
	}
	if d.cfg.Metrics.Listen != "" {
		if b.metrics, err = tcp("metrics", d.cfg.Metrics.Listen); err != nil {
			return nil, err
		}
	}
	return &b, nil
}

// fields are the serving line's listeners, each by name with the address
// it is bound to. A listener added later belongs here too, so that one
// line says everything egressd listens on.
func (b *bound) fields() []zap.Field {
	fs := []zap.Field{zap.String("proxy", b.proxy.Addr().String()), zap.String("admin", b.admin.Addr().String())}
	if b.socks != nil {
		fs = append(fs, zap.String("socks", b.socks.Addr().String()))
	}
	if b.transparent != nil {
		fs = append(fs, zap.String("transparent", b.transparent.Addr().String()))
	}
	if b.dnsPC != nil {
		fs = append(fs, zap.String("dns", b.dnsPC.LocalAddr().String()))
		// Only a port of 0 in dns.listen gives TCP another port.
		if tcp := b.dnsLn.Addr().String(); tcp != b.dnsPC.LocalAddr().String() {
			fs = append(fs, zap.String("dns_tcp", tcp))
		}
	}
	if b.gate != nil {
		fs = append(fs, zap.String("postgres", b.gate.Addr().String()))
	}
	if b.metrics != nil {
		fs = append(fs, zap.String("metrics", b.metrics.Addr().String()))
	}
	return fs
}

// descriptorBudget raises the soft RLIMIT_NOFILE to the hard limit, logs
// both, and returns the budget the client listeners refuse by; nil (no
// budget) if the limit cannot be read.
func descriptorBudget(log *zap.Logger) *fdlimit.Budget {
	lim, err := fdlimit.Raise()
	if err != nil {
		log.Warn("cannot read or raise the file descriptor limit; clients are refused only on max_conns", zap.Error(err))
		return nil
	}
	b := fdlimit.NewBudget(lim.Soft)
	log.Info("file descriptor limit", zap.Uint64("soft", lim.Soft), zap.Uint64("hard", lim.Hard),
		zap.Int("reserve", b.Reserve()))
	return b
}

// transparentChecks are what the transparent listener checks an original
// destination against: the answers egressd's DNS server gave each client
// (nil without a transparent listener or a DNS listener), and egressd's
// own addresses (dns.steer_to; the listener's address, or every local
// address when it listens on all), where the name alone decides.
func transparentChecks(cfg *config.Config, log *zap.Logger) (*dnsguard.Given, []netip.Addr) {
	if cfg.Proxy.TransparentListen == "" {
		return nil, nil
	}
	var own []netip.Addr
	if a, err := netip.ParseAddr(cfg.DNS.SteerTo); err == nil {
		own = append(own, a)
	}
	if ap, err := netip.ParseAddrPort(cfg.Proxy.TransparentListen); err == nil {
		if !ap.Addr().IsUnspecified() {
			own = append(own, ap.Addr())
		} else if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range addrs {
				if p, err := netip.ParsePrefix(a.String()); err == nil {
					own = append(own, p.Addr())
				}
			}
		}
	}
	if cfg.DNS.Listen == "" {
		log.Warn("proxy.transparent_listen is set but dns.listen is not: a redirected connection's original destination " +
			"can be checked only against the addresses egressd's DNS gave its client, so every one not addressed to egressd " +
			"itself is refused destination_mismatch; serve DNS to the sandboxes (dns.listen)")
		return nil, own
	}
	return dnsguard.NewGiven(0, 0), own
}
