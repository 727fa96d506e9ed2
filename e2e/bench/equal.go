package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"time"
)

// Keep-alive GET of 1 KiB at one offered rate for every proxy (issue 28):
// equalShare of the rate Squid reached in the same repeat's keep-alive GET
// workload, so each proxy is compared at the same load near, not at, its
// saturation. wrk cannot hold a rate, so the Go generator does: every
// connection sends on a fixed schedule, and a request's latency runs from
// its scheduled time (a late send counts against the proxy, as with wrk2),
// so a stalled proxy cannot hide its stall by being offered less.

// equalShare is the fraction of Squid's saturated rate every proxy is
// offered in the equal-load workload.
const equalShare = 0.8

// pacedSpec is one run of the paced generator.
type pacedSpec struct {
	proxy    string // proxy address; "" for direct
	url      string // the origin URL requested
	conns    int
	rate     float64 // offered requests per second, over every connection
	duration time.Duration
	maxReqs  int64 // per connection
}

// runPaced offers spec.rate requests per second over spec.conns keep-alive
// connections for spec.duration (or until every connection has sent
// maxReqs), and returns the requests done and their latencies from their
// scheduled times. The first error of any connection ends the run.
func runPaced(spec pacedSpec) (loadResult, error) {
	if spec.rate <= 0 || spec.conns < 1 {
		return loadResult{}, fmt.Errorf("paced load: rate %g over %d connections", spec.rate, spec.conns)
	}
	addr, req, err := pacedRequest(spec)
	if err != nil {
		return loadResult{}, err
	}
	conns, err := openConns(spec.conns, func() (net.Conn, error) { return dialTCP(addr) })
	if err != nil {
		return loadResult{}, err
	}
	// Each connection sends every period, the connections' schedules
	// spread evenly over one period.
	period := time.Duration(float64(spec.conns) / spec.rate * float64(time.Second))
	return runClients(spec.duration, conns, func(c net.Conn) net.Conn { return c },
		func(ctx context.Context, start time.Time, i int, c net.Conn, h *hist, n *int64) error {
			offset := period * time.Duration(i) / time.Duration(spec.conns)
			return pacedClient(ctx, c, req, start.Add(offset), period, spec.maxReqs, h, n)
		})
}

// pacedRequest is the address to dial and the request to send: in
// absolute form through a proxy, in origin form direct.
func pacedRequest(spec pacedSpec) (addr string, req []byte, err error) {
	r, err := http.NewRequest(http.MethodGet, spec.url, nil)
	if err != nil {
		return "", nil, err
	}
	target := r.URL.RequestURI()
	addr = r.URL.Host
	if spec.proxy != "" {
		target, addr = spec.url, spec.proxy
	}
	return addr, []byte("GET " + target + " HTTP/1.1\r\nHost: " + r.URL.Host + "\r\nUser-Agent: egressd-bench\r\n\r\n"), nil
}

// pacedClient sends req on c at next, next+period, … until ctx ends or max
// requests are done, adding each request's latency from its scheduled time
// to h. A response that comes after the next request's time makes that
// request go at once, late, its lateness in its latency.
func pacedClient(ctx context.Context, c net.Conn, req []byte, next time.Time, period time.Duration, max int64, h *hist, n *int64) error {
	br := bufio.NewReaderSize(c, 16<<10)
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	for *n < max || max == 0 {
		if wait := time.Until(next); wait > 0 {
			t.Reset(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				return nil
			}
		}
		if err := exchange(c, br, req); err != nil {
			return ctxErr(ctx, err)
		}
		h.add(time.Since(next))
		*n++
		next = next.Add(period)
	}
	return nil
}

// equalRate is the rate the equal-load workload offers: equalShare of the
// median of Squid's keep-alive GET rounds so far (get holds this repeat's
// rounds only), or 0 when there is none.
func equalRate(get *Workload) float64 {
	if get == nil {
		return 0
	}
	sq := get.named("squid")
	if sq == nil || sq.Status != "" {
		return 0
	}
	return equalShare * sq.rate()
}

// equalRound measures one target of the equal-load workload at rate: the
// achieved rate, the latency percentiles and the proxy's CPU per 1,000
// requests.
func (b *bench) equalRound(t *Target, p *running, rate float64) {
	if t.Status != "" {
		return
	}
	if rate == 0 {
		t.fail("not measured: no keep-alive GET figure for squid in this run (run the get workload with squid among -peers)")
		return
	}
	spec := pacedSpec{url: fmt.Sprintf("http://127.0.0.1:%d/bytes/1024", b.org.http), conns: b.o.conns,
		rate: rate, duration: b.o.duration, maxReqs: b.o.maxReqs}
	var c0 float64
	if p != nil {
		spec.proxy = p.addr
		c0 = p.cpu().Seconds()
	}
	res, err := runPaced(spec)
	if err != nil {
		t.fail("error: " + err.Error())
		return
	}
	r, err := res.round(p, c0)
	if err != nil {
		t.fail("error: " + err.Error())
		return
	}
	t.Rounds = append(t.Rounds, r)
	b.progress("%s: GET at %.0f req/s offered: %.0f req/s, p50 %.2f ms, p99 %.2f ms", t.Name, rate, r.Rate,
		r.LatencyMS[slices.Index(latencyQuantiles, 50)], r.LatencyMS[slices.Index(latencyQuantiles, 99)])
}
