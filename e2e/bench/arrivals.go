package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// CONNECT bulk arriving by SOCKS5 and through the transparent listener
// (issue 26), beside CONNECT through the HTTP proxy in the same run and on
// the same egressd process.
//
// The transparent target needs a redirect: an nftables table in this
// machine's own network namespace, nat output, that sends TCP from
// transparentSource to the sink's port to egressd's transparent listener.
// Only connections from transparentSource match (this program binds it;
// nothing else on the machine uses it), so egressd's own dial to the sink
// from 127.0.0.1, and every other workload, pass untouched; the table is
// deleted on every exit path. The client first asks egressd's DNS for
// originName from the same address, as a redirected client would, since
// the transparent listener accepts only a destination its DNS gave.

// transparentSource is the loopback address the transparent target's
// client connects from.
const transparentSource = "127.0.0.3"

// Names of the targets beside "egressd" in the CONNECT workloads.
const (
	targetSOCKS       = "egressd (socks5)"
	targetTransparent = "egressd (transparent)"
)

// dialSOCKS opens a SOCKS5 CONNECT (RFC 1928, no authentication) through
// proxy to host:port; a name is sent as a name (socks5h), an IP literal as
// an address.
func dialSOCKS(proxy, host string, port int) (net.Conn, error) {
	c, err := dialTCP(proxy)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if err := socksHandshake(c, host, port); err != nil {
		c.Close()
		return nil, fmt.Errorf("socks5 connect %s:%d: %w", host, port, err)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

func socksHandshake(c net.Conn, host string, port int) error {
	if _, err := c.Write([]byte{5, 1, 0}); err != nil {
		return err
	}
	var choice [2]byte
	if _, err := io.ReadFull(c, choice[:]); err != nil {
		return fmt.Errorf("method choice: %w", err)
	}
	if choice != [2]byte{5, 0} {
		return fmt.Errorf("method choice %x; want no authentication", choice)
	}
	req := []byte{5, 1, 0}
	if a, err := netip.ParseAddr(host); err == nil && a.Is4() {
		req = append(append(req, 1), a.AsSlice()...)
	} else {
		req = append(append(req, 3, byte(len(host))), host...)
	}
	req = binary.BigEndian.AppendUint16(req, uint16(port))
	if _, err := c.Write(req); err != nil {
		return err
	}
	var head [4]byte
	if _, err := io.ReadFull(c, head[:]); err != nil {
		return fmt.Errorf("reply: %w", err)
	}
	if head[0] != 5 || head[1] != 0 {
		return fmt.Errorf("reply %x; want success", head)
	}
	// The bound address, which a CONNECT client does not need.
	var n int
	switch head[3] {
	case 1:
		n = 4 + 2
	case 4:
		n = 16 + 2
	case 3:
		var l [1]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return err
		}
		n = int(l[0]) + 2
	default:
		return fmt.Errorf("reply address type %d", head[3])
	}
	_, err := io.ReadFull(c, make([]byte, n))
	return err
}

// redirectTransparent installs the nat output rule sending
// transparentSource's TCP to 127.0.0.1:port to egressd's transparent
// listener, replacing the rule of an earlier instance (-repeat starts a
// new one), and removes it at exit.
func redirectTransparent(port int, transparent string) error {
	_, tport, err := net.SplitHostPort(transparent)
	if err != nil {
		return err
	}
	table := fmt.Sprintf("egressd_bench_%d", os.Getpid())
	// Added, deleted and written again in one transaction: the file
	// replaces whatever the table held.
	rules := fmt.Sprintf(`add table ip %[1]s
delete table ip %[1]s
table ip %[1]s {
	chain output {
		type nat hook output priority -100; policy accept;
		ip saddr %[2]s ip daddr 127.0.0.1 tcp dport %[3]d redirect to :%[4]s
	}
}
`, table, transparentSource, port, tport)
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft (root and nftables needed for the transparent target): %w: %s", err, bytes.TrimSpace(out))
	}
	redirectCleanup.Do(func() {
		atExit(func() { exec.Command("nft", "delete", "table", "ip", table).Run() }) //nolint:errcheck // best effort at exit; a leftover matches only transparentSource
	})
	return nil
}

// redirectCleanup registers the redirect's removal once.
var redirectCleanup sync.Once

// dialTransparent resolves originName through egressd's DNS and connects
// to the answer's port from transparentSource, which the redirect sends
// to the transparent listener.
func dialTransparent(dnsAddr string, port int) (net.Conn, error) {
	cl := &dns.Client{Timeout: 5 * time.Second, Dialer: &net.Dialer{
		LocalAddr: &net.UDPAddr{IP: net.ParseIP(transparentSource)}}}
	q := new(dns.Msg)
	q.SetQuestion(originName+".", dns.TypeA)
	r, _, err := cl.Exchange(q, dnsAddr)
	if err != nil {
		return nil, fmt.Errorf("egressd dns %s: %w", originName, err)
	}
	var ip net.IP
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			ip = a.A
		}
	}
	if ip == nil {
		return nil, fmt.Errorf("egressd dns %s: %s, no A record", originName, dns.RcodeToString[r.Rcode])
	}
	d := &net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(transparentSource)}}
	c, err := d.Dial("tcp", net.JoinHostPort(ip.String(), fmt.Sprint(port)))
	if err != nil {
		return nil, fmt.Errorf("transparent dial: %w", err)
	}
	return c, nil
}

// arrivalRounds runs, right after egressd's CONNECT round of a bulk
// workload, the same transfer by SOCKS5 and (TLS only: the transparent
// listener decides by SNI or Host, and plain bulk bytes have neither)
// through the transparent listener, on the same egressd.
func (b *bench) arrivalRounds(wl *Workload, p *running, withTLS bool) {
	socks := wl.target(targetSOCKS, kindEgressd)
	if p.socks == "" {
		socks.fail("not measured: egressd started without arrivals")
		return
	}
	b.bulkRound(socks, p, withTLS, viaSOCKS)
	if !withTLS {
		return
	}
	tr := wl.target(targetTransparent, kindEgressd)
	if b.redirected != p.transparent {
		if err := redirectTransparent(b.org.tlsSink, p.transparent); err != nil {
			tr.fail("not measured: " + err.Error())
			return
		}
		b.redirected = p.transparent
	}
	b.bulkRound(tr, p, withTLS, viaTransparent)
}
