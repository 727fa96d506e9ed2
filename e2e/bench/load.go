package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sync"
	"time"
)

// The Go load generator for TLS workloads (wrk cannot CONNECT through a
// proxy): N keep-alive clients, each on its own connection (direct, or
// through a proxy's CONNECT tunnel), each sending GETs back to back, every
// request's latency counted in one histogram. Bounded in time and count.

// hist is a latency histogram with buckets growing by 2^(1/16) from 1 µs:
// under 4.5% relative error, 16 × 35 buckets up to ~9 hours.
type hist struct{ n [16 * 35]int64 }

func bucketOf(d time.Duration) int {
	us := float64(d) / float64(time.Microsecond)
	if us <= 1 {
		return 0
	}
	return min(int(16*math.Log2(us)), len(hist{}.n)-1)
}

func (h *hist) add(d time.Duration) { h.n[bucketOf(d)]++ }

func (h *hist) merge(o *hist) {
	for i, v := range o.n {
		h.n[i] += v
	}
}

func (h *hist) count() int64 {
	var n int64
	for _, v := range h.n {
		n += v
	}
	return n
}

// quantile is the upper edge of the bucket holding quantile q (0..1).
func (h *hist) quantile(q float64) time.Duration {
	total := h.count()
	if total == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(total)))
	var seen int64
	for i, v := range h.n {
		seen += v
		if seen >= rank {
			return time.Duration(math.Exp2(float64(i+1)/16) * float64(time.Microsecond))
		}
	}
	return 0
}

func dialTCP(addr string) (net.Conn, error) {
	return net.DialTimeout("tcp", addr, 10*time.Second)
}

// dialTunnel opens a CONNECT tunnel through proxy to target.
func dialTunnel(proxy, target string) (net.Conn, error) {
	c, err := dialTCP(proxy)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	// Read the response head byte by byte so no tunnel byte is consumed.
	var head []byte
	b := make([]byte, 1)
	for !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		if _, err := c.Read(b); err != nil {
			c.Close()
			return nil, fmt.Errorf("CONNECT %s: %w", target, err)
		}
		head = append(head, b[0])
		if len(head) > 4096 {
			c.Close()
			return nil, errors.New("CONNECT response too long")
		}
	}
	if !bytes.HasPrefix(head, []byte("HTTP/1.1 200")) && !bytes.HasPrefix(head, []byte("HTTP/1.0 200")) {
		c.Close()
		return nil, fmt.Errorf("CONNECT %s: %q", target, bytes.TrimSpace(head))
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// loadSpec is one run of the generator.
type loadSpec struct {
	proxy      string // "" for direct
	target     string // host:port, dialled directly or named in CONNECT
	serverName string // TLS server name; the target's host when empty
	roots      *x509.CertPool
	conns      int
	duration   time.Duration
	maxReqs    int64 // per client
	// request, if set, is the request each client sends (its Host line
	// names target), else a GET of 1 KiB.
	request func(host string) []byte
}

type loadResult struct {
	requests int64
	elapsed  time.Duration
	lat      hist
}

func (r loadResult) rps() float64 { return float64(r.requests) / r.elapsed.Seconds() }

// runLoad runs spec's clients until its duration passes or every client
// has sent maxReqs requests. The first error of any client ends the run.
func runLoad(spec loadSpec) (loadResult, error) {
	conns, err := openConns(spec.conns, func() (*tls.Conn, error) { return openTLS(spec) })
	if err != nil {
		return loadResult{}, err
	}
	// Host names the port too, as clients do for a non-default port (and
	// Squid's ssl_bump routes by it).
	host, port, _ := net.SplitHostPort(spec.target)
	if spec.serverName != "" {
		host = spec.serverName
	}
	host = net.JoinHostPort(host, port)
	req := []byte("GET /bytes/1024 HTTP/1.1\r\nHost: " + host + "\r\nUser-Agent: egressd-bench\r\n\r\n")
	if spec.request != nil {
		req = spec.request(host)
	}
	return runClients(spec.duration, conns, (*tls.Conn).NetConn,
		func(ctx context.Context, _ time.Time, _ int, c *tls.Conn, h *hist, n *int64) error {
			return client(ctx, c, req, spec.maxReqs, h, n)
		})
}

// openConns opens n connections, or none: on an error it closes those it
// opened.
func openConns[C net.Conn](n int, open func() (C, error)) ([]C, error) {
	conns := make([]C, 0, n)
	for range n {
		c, err := open()
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return nil, err
		}
		conns = append(conns, c)
	}
	return conns, nil
}

// runClients runs each for every connection, for d at most, and merges
// their latencies and counts. The first error ends every client. A client
// blocked in a read when the time is up is woken by a deadline on its
// connection's socket (raw). Every connection is closed on return.
func runClients[C net.Conn](d time.Duration, conns []C, raw func(C) net.Conn,
	each func(ctx context.Context, start time.Time, i int, c C, h *hist, n *int64) error) (loadResult, error) {
	var (
		mu    sync.Mutex
		res   loadResult
		first error
		wg    sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	for i, c := range conns {
		wg.Go(func() {
			defer c.Close()
			var h hist
			var n int64
			err := each(ctx, start, i, c, &h, &n)
			mu.Lock()
			defer mu.Unlock()
			res.lat.merge(&h)
			res.requests += n
			if err != nil && first == nil {
				first = err
				cancel()
			}
		})
	}
	stop := context.AfterFunc(ctx, func() {
		for _, c := range conns {
			raw(c).SetDeadline(time.Now())
		}
	})
	defer stop()
	wg.Wait()
	res.elapsed = time.Since(start)
	return res, first
}

func openTLS(spec loadSpec) (*tls.Conn, error) {
	var raw net.Conn
	var err error
	if spec.proxy == "" {
		raw, err = dialTCP(spec.target)
	} else {
		raw, err = dialTunnel(spec.proxy, spec.target)
	}
	if err != nil {
		return nil, err
	}
	name := spec.serverName
	if name == "" {
		name, _, _ = net.SplitHostPort(spec.target)
	}
	c := tls.Client(raw, &tls.Config{ServerName: name, RootCAs: spec.roots, NextProtos: []string{"http/1.1"}})
	raw.SetDeadline(time.Now().Add(30 * time.Second))
	if err := c.Handshake(); err != nil {
		raw.Close()
		return nil, fmt.Errorf("tls handshake with %s: %w", spec.target, err)
	}
	raw.SetDeadline(time.Time{})
	return c, nil
}

// client sends req on c until ctx ends or max requests are done, adding
// each request's latency to h.
func client(ctx context.Context, c net.Conn, req []byte, max int64, h *hist, n *int64) error {
	br := bufio.NewReaderSize(c, 16<<10)
	for *n < max || max == 0 {
		t0 := time.Now()
		if err := exchange(c, br, req); err != nil {
			return ctxErr(ctx, err)
		}
		h.add(time.Since(t0))
		*n++
	}
	return nil
}

// ctxErr hides the error of a read or write cut short by the end of the run.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// round is one round of a load result: the achieved rate, the latency
// percentiles and, when p is the proxy measured, its CPU per 1,000
// requests since cpu0 (its CPU seconds when the load began).
func (res loadResult) round(p *running, cpu0 float64) (Round, error) {
	if res.requests == 0 {
		return Round{}, errors.New("no request completed")
	}
	r := Round{Rate: res.rps()}
	for _, q := range latencyQuantiles {
		r.LatencyMS = append(r.LatencyMS, float64(res.lat.quantile(q/100))/float64(time.Millisecond))
	}
	if p != nil {
		r.CPU = (p.cpu().Seconds() - cpu0) * 1000 / (float64(res.requests) / 1000)
	}
	return r, nil
}

// exchange writes req on c and reads its response whole from br, which
// must be 200. Its caller ends on any error, through ctxErr: an error
// because the run's time is up is the end of the run, not a request.
func exchange(c net.Conn, br *bufio.Reader, req []byte) error {
	if _, err := c.Write(req); err != nil {
		return err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s (%q)", req[:bytes.IndexByte(req, ' ')], resp.Status, resp.Header.Get("X-Egressd-Decision"))
	}
	return nil
}
