package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// CONNECT bulk throughput.

// startSink accepts connections, reads everything, then answers one byte
// so the sender knows the transfer is complete.
func startSink() (int, error) {
	return serveTCP(func(c net.Conn) {
		buf := make([]byte, 256<<10)
		for {
			if _, err := c.Read(buf); err != nil {
				break
			}
		}
		_, _ = c.Write([]byte{1}) // the client may be gone: it measured what it needed
	})
}

func sendBulk(c net.Conn, n int64) (time.Duration, error) {
	buf := bytes.Repeat([]byte{0xab}, 256<<10)
	start := time.Now()
	for sent := int64(0); sent < n; {
		m := min(int64(len(buf)), n-sent)
		w, err := c.Write(buf[:m])
		sent += int64(w)
		if err != nil {
			return 0, err
		}
	}
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		return 0, fmt.Errorf("await sink: %w", err)
	}
	return time.Since(start), nil
}

func dialTunnel(proxy, target string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", proxy, 10*time.Second)
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
	if !bytes.HasPrefix(head, []byte("HTTP/1.1 200")) {
		c.Close()
		return nil, fmt.Errorf("CONNECT %s: %q", target, head)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

func benchConnect(o options, e *egressd, port int) error {
	target := fmt.Sprintf("127.0.0.1:%d", port)
	var gp *egressd
	if o.baseline {
		var err error
		if gp, err = startGoproxy(o); err != nil {
			return err
		}
		defer gp.kill()
	}
	// Each round measures direct, egressd and bare goproxy back to back, so
	// a slow minute of the shared machine weighs on all three alike; the
	// verdict is the median of the rounds' own ratios.
	var direct, proxied, bare, ratios, bareRatios []float64
	var dBusy, pBusy [][]float64
	for i := range o.rounds {
		c, err := net.Dial("tcp", target)
		if err != nil {
			return err
		}
		before := readCPUTimes()
		d, err := sendBulk(c, o.bulk)
		dBusy = append(dBusy, readCPUTimes().busySince(before))
		c.Close()
		if err != nil {
			return err
		}
		var errc chan error
		if o.profile != "" && i == 0 {
			// The profile covers about the first second of the transfer.
			errc = make(chan error, 1)
			go func() { errc <- profile(e, o.profile+"-connect.pprof", time.Second) }()
		}
		before = readCPUTimes()
		p, err := tunnelBulk(e.proxy, target, o.bulk)
		pBusy = append(pBusy, readCPUTimes().busySince(before))
		if errc != nil {
			if perr := <-errc; perr != nil {
				return perr
			}
		}
		if err != nil {
			return err
		}
		direct = append(direct, float64(o.bulk)/d.Seconds())
		proxied = append(proxied, float64(o.bulk)/p.Seconds())
		ratios = append(ratios, d.Seconds()/p.Seconds())
		if gp != nil {
			b, err := tunnelBulk(gp.proxy, target, o.bulk)
			if err != nil {
				return err
			}
			bare = append(bare, float64(o.bulk)/b.Seconds())
			bareRatios = append(bareRatios, b.Seconds()/p.Seconds())
		}
	}
	ratio := median(ratios)
	fmt.Printf("CONNECT bulk, %d MiB x %d rounds (medians):\n  direct  %7.0f MiB/s\n  proxied %7.0f MiB/s  ratio %.2fx (median of rounds; target >= 0.90) %s\n",
		o.bulk>>20, o.rounds, median(direct)/(1<<20), median(proxied)/(1<<20), ratio, verdict(ratio >= 0.9))
	// Busy cores say whether a run was CPU-bound or waiting on wake-ups.
	fmt.Printf("  busy per CPU (median): direct %s; proxied %s\n", medianBusy(dBusy), medianBusy(pBusy))
	if gp != nil {
		fmt.Printf("  bare goproxy (same core): %7.0f MiB/s; egressd is %.2fx bare goproxy (median of rounds)\n",
			median(bare)/(1<<20), median(bareRatios))
	}
	return nil
}

// tunnelBulk sends n bytes through a CONNECT tunnel of proxy to target.
func tunnelBulk(proxy, target string, n int64) (time.Duration, error) {
	t, err := dialTunnel(proxy, target)
	if err != nil {
		return 0, err
	}
	defer t.Close()
	return sendBulk(t, n)
}
