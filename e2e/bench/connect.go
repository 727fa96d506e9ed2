package main

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"
)

// CONNECT bulk throughput, with plain bytes or TLS inside the tunnel.

// sendBulk sends a transfer of n bytes to c's sink and waits for the
// sink's one-byte acknowledgement.
func sendBulk(c net.Conn, n int64) (time.Duration, error) {
	buf := bytes.Repeat([]byte{0xab}, 256<<10)
	start := time.Now()
	c.SetDeadline(start.Add(5 * time.Minute))
	var head [8]byte
	binary.BigEndian.PutUint64(head[:], uint64(n))
	if _, err := c.Write(head[:]); err != nil {
		return 0, err
	}
	for sent := int64(0); sent < n; {
		m := min(int64(len(buf)), n-sent)
		w, err := c.Write(buf[:m])
		sent += int64(w)
		if err != nil {
			return 0, err
		}
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		return 0, fmt.Errorf("await sink: %w", err)
	}
	return time.Since(start), nil
}

// Ways a bulk transfer arrives at egressd besides the HTTP proxy's
// CONNECT.
const (
	viaSOCKS       = "socks"
	viaTransparent = "transparent"
)

// bulkRound measures one bulk transfer of b.o.bulk bytes to the plain or
// TLS sink, direct (p nil) or through p: MiB/s and proxy CPU ms per GiB.
// via is "" for a CONNECT through the HTTP proxy, or viaSOCKS or
// viaTransparent for egressd's other listeners.
func (b *bench) bulkRound(t *Target, p *running, withTLS bool, via string) {
	if t.Status != "" {
		return
	}
	port := b.org.sink
	if withTLS {
		port = b.org.tlsSink
	}
	host := "127.0.0.1"
	if withTLS && (p == nil || p.names) {
		host = originName
	}
	var c net.Conn
	var err error
	var c0 float64
	if p != nil {
		c0 = p.cpu().Seconds()
	}
	switch {
	case p == nil:
		c, err = dialTCP(fmt.Sprintf("127.0.0.1:%d", port))
	case via == viaSOCKS:
		c, err = dialSOCKS(p.socks, host, port)
	case via == viaTransparent:
		c, err = dialTransparent(p.dnsListen, port)
	default:
		c, err = dialTunnel(p.addr, net.JoinHostPort(host, fmt.Sprint(port)))
	}
	if err != nil {
		t.fail("error: " + err.Error())
		return
	}
	defer c.Close()
	if withTLS {
		// A listener that takes the connection and never answers fails
		// the round instead of holding the run.
		c.SetDeadline(time.Now().Add(30 * time.Second))
		tc := tls.Client(c, &tls.Config{ServerName: originName, RootCAs: b.org.roots})
		if err := tc.Handshake(); err != nil {
			t.fail("error: tls handshake: " + err.Error())
			return
		}
		c = tc
	}
	d, err := sendBulk(c, b.o.bulk)
	if err != nil {
		t.fail("error: " + err.Error())
		return
	}
	r := Round{Rate: float64(b.o.bulk) / (1 << 20) / d.Seconds()}
	if p != nil {
		r.CPU = (p.cpu().Seconds() - c0) * 1000 / (float64(b.o.bulk) / (1 << 30))
	}
	t.Rounds = append(t.Rounds, r)
	b.progress("%s: bulk (tls %t) %.0f MiB/s", t.Name, withTLS, r.Rate)
}
