package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/elazarl/goproxy"
)

// The ceilings: bare Go relays with no identity, policy, address checks or
// audit, run as subcommands of this program (-serve-relay, -serve-pgrelay)
// so they can be pinned like the proxies. A CONNECT tunnel and the
// Postgres relay are two io.Copy calls (splice(2) on Linux); a plain
// request is one http.Transport round trip.

// The relays' flags: internal, set by startRelay and startPgRelay.
var relayArgs struct{ relay, dns, pgRelay, upstream, goproxy string }

func relayFlags(fs *flag.FlagSet) {
	fs.StringVar(&relayArgs.relay, "serve-relay", "", "internal: run the bare HTTP relay on this address")
	fs.StringVar(&relayArgs.dns, "relay-dns", "", "internal: DNS server of the bare HTTP relay")
	fs.StringVar(&relayArgs.pgRelay, "serve-pgrelay", "", "internal: run the bare Postgres relay on this address")
	fs.StringVar(&relayArgs.upstream, "relay-upstream", "", "internal: upstream of the bare Postgres relay")
	fs.StringVar(&relayArgs.goproxy, "serve-goproxy", "", "internal: run a bare goproxy on this address")
}

// relayCommand is the relay the parsed flags ask for, or nil.
func relayCommand() func() error {
	switch {
	case relayArgs.relay != "":
		return func() error { return serveRelay(relayArgs.relay, relayArgs.dns) }
	case relayArgs.pgRelay != "":
		return func() error { return servePgRelay(relayArgs.pgRelay, relayArgs.upstream) }
	case relayArgs.goproxy != "":
		return func() error { return serveGoproxy(relayArgs.goproxy, relayArgs.dns) }
	}
	return nil
}

// relayDialer dials with names resolved through dnsAddr.
func relayDialer(dnsAddr string) *net.Dialer {
	return &net.Dialer{Timeout: 10 * time.Second, Resolver: &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, dnsAddr)
		},
	}}
}

// serveGoproxy runs the library egressd's proxy is built on, bare: no
// identity, policy, address checks or audit. What egressd adds to it is
// egressd's own cost.
func serveGoproxy(addr, dnsAddr string) error {
	gp := goproxy.NewProxyHttpServer()
	gp.Tr = &http.Transport{DialContext: relayDialer(dnsAddr).DialContext, MaxIdleConnsPerHost: 64}
	gp.ConnectDial = relayDialer(dnsAddr).Dial
	srv := &http.Server{Addr: addr, Handler: gp, ReadHeaderTimeout: 10 * time.Second}
	return srv.ListenAndServe()
}

// serveRelay runs the HTTP relay on addr; names resolve through dnsAddr.
func serveRelay(addr, dnsAddr string) error {
	dialer := relayDialer(dnsAddr)
	tr := &http.Transport{DialContext: dialer.DialContext, MaxIdleConnsPerHost: 64, MaxIdleConns: 512}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodConnect {
			up, err := dialer.Dial("tcp", r.Host)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			c, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				up.Close()
				return
			}
			if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
				c.Close()
				up.Close()
				return
			}
			splice(c, up)
			return
		}
		r.RequestURI = ""
		resp, err := tr.RoundTrip(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body) //nolint:errcheck // a relay: the peer sees a cut response
	})
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	return srv.ListenAndServe()
}

// servePgRelay relays every connection on addr to upstream, byte for byte.
func servePgRelay(addr, upstream string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			up, err := net.DialTimeout("tcp", upstream, 10*time.Second)
			if err != nil {
				fmt.Fprintln(os.Stderr, "pg relay:", err)
				c.Close()
				return
			}
			splice(c, up)
		}()
	}
}

// splice copies both ways until both directions end, then closes both.
func splice(a, b net.Conn) {
	var wg sync.WaitGroup
	half := func(dst, src net.Conn) {
		// io.Copy between TCP connections splices through a pipe pair
		// held while it waits: an idle tunnel would cost six descriptors
		// instead of two. Wait until src is readable first.
		awaitReadable(src)
		io.Copy(dst, src) //nolint:errcheck // a relay: either side sees the cut
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite() //nolint:errcheck // a relay: either side sees the cut
		} else {
			dst.Close()
		}
	}
	wg.Go(func() { half(a, b) })
	wg.Go(func() { half(b, a) })
	wg.Wait()
	a.Close()
	b.Close()
}

// awaitReadable returns when c has bytes (or EOF, or an error) to read,
// without reading them. The check peeks: the poller's readiness may have
// been spent before the wait began, and an edge-triggered poller would not
// report it again.
func awaitReadable(c net.Conn) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	var b [1]byte
	rc.Read(func(fd uintptr) bool { //nolint:errcheck // only waits; the relay's own read reports errors
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return err != syscall.EAGAIN && err != syscall.EINTR
	})
}
