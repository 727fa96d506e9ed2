package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/egressd/egressd/dnsguard/dnstest"
)

// The origin side of every workload, served by this process on the load
// core: a 1 KiB HTTP server, the same over TLS (two listeners: one reached
// through plain tunnels, one through inspected ones, so one egressd can
// hold both rules), bulk sinks with and without TLS, a holder of idle
// connections, and a DNS server for originName. TLS workloads need a name:
// SNI cannot carry an IP.

// originName is the TLS origin's host name, resolved to 127.0.0.1 by the
// bench's DNS server (egressd, smokescreen) and hosts file (Squid).
const originName = "origin.bench.test"

type origin struct {
	http      int    // plain HTTP, 1 KiB bodies
	https     int    // TLS HTTP reached through plain tunnels
	inspected int    // TLS HTTP reached through inspected tunnels
	sink      int    // bulk sink
	tlsSink   int    // bulk sink inside TLS
	holder    int    // idle connections
	dns       string // DNS server, "127.0.0.1:port" (UDP and TCP)
	caFile    string // PEM of the CA that signed the origin's certificate
	hostsFile string // "127.0.0.1 originName", for Squid
	roots     *x509.CertPool
	cert      tls.Certificate
}

func startOrigin(work string) (*origin, error) {
	o := &origin{}
	var err error
	if err = o.makeCert(work); err != nil {
		return nil, err
	}
	o.hostsFile = filepath.Join(work, "hosts")
	if err := os.WriteFile(o.hostsFile, []byte("127.0.0.1 "+originName+"\n"), 0o644); err != nil {
		return nil, err
	}
	if o.http, err = serveHTTP(nil); err != nil {
		return nil, err
	}
	tc := &tls.Config{Certificates: []tls.Certificate{o.cert}, NextProtos: []string{"http/1.1"}}
	if o.https, err = serveHTTP(tc); err != nil {
		return nil, err
	}
	if o.inspected, err = serveHTTP(tc); err != nil {
		return nil, err
	}
	if o.sink, err = serveTCP(sink); err != nil {
		return nil, err
	}
	if o.tlsSink, err = serveTCP(func(c net.Conn) {
		t := tls.Server(c, tc)
		defer t.Close()
		sink(t)
	}); err != nil {
		return nil, err
	}
	// The holder only keeps idle tunnels open: how a connection ends is not measured.
	if o.holder, err = serveTCP(func(c net.Conn) { held.Add(1); io.Copy(io.Discard, c) }); err != nil { //nolint:errcheck // see above
		return nil, err
	}
	o.dns, err = serveDNS()
	return o, err
}

// makeCert makes a CA and a certificate for originName and 127.0.0.1.
func (o *origin) makeCert(work string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "egressd bench origin CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: originName},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames: []string{originName}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	o.cert = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	o.roots = x509.NewCertPool()
	o.roots.AddCert(ca)
	o.caFile = filepath.Join(work, "origin-ca.pem")
	return os.WriteFile(o.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644)
}

// serveHTTP serves 1 KiB bodies with keep-alive, over TLS when tc is set.
func serveHTTP(tc *tls.Config) (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	body := bytes.Repeat([]byte("x"), 1024)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) //nolint:errcheck // a short body is the client's failure
		// The body workload's MCP server and model API answer in their
		// protocols, with a 1 KiB answer like every other path's.
		switch r.URL.Path {
		case "/mcp":
			w.Header().Set("Content-Type", "application/json")
			w.Write(mcpAnswer) //nolint:errcheck // the load generator counts failed responses
			return
		case "/v1/chat/completions":
			w.Header().Set("Content-Type", "application/json")
			w.Write(modelAnswer) //nolint:errcheck // the load generator counts failed responses
			return
		}
		w.Header().Set("Content-Length", "1024")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(body) //nolint:errcheck // the load generator counts failed responses
	}), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // serves until the program ends
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// serveTCP accepts loopback connections until the program ends, running
// handle on each and closing the connection after it; it returns the port.
func serveTCP(handle func(net.Conn)) (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// sink reads a transfer (an 8-byte big-endian length, then that many
// bytes), then answers one byte so the sender knows it is complete. The
// length is in band because Squid and tinyproxy end a tunnel when the
// client half-closes it.
func sink(c net.Conn) {
	var n [8]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return
	}
	buf := make([]byte, 256<<10)
	if _, err := io.CopyBuffer(io.Discard, io.LimitReader(c, int64(binary.BigEndian.Uint64(n[:]))), buf); err != nil {
		return
	}
	c.Write([]byte{1}) //nolint:errcheck // the load generator counts failed responses
}

// serveDNS answers originName with 127.0.0.1 (and no AAAA); other names
// get NXDOMAIN.
func serveDNS() (string, error) {
	pc, ln, err := dnstest.ListenPair()
	if err != nil {
		return "", err
	}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		m.Authoritative = true
		if len(req.Question) != 1 || !strings.EqualFold(req.Question[0].Name, originName+".") {
			m.Rcode = dns.RcodeNameError
		} else if req.Question[0].Qtype == dns.TypeA {
			m.Answer = []dns.RR{&dns.A{
				Hdr: dns.RR_Header{Name: req.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300},
				A:   netip.MustParseAddr("127.0.0.1").AsSlice(),
			}}
		}
		w.WriteMsg(m) //nolint:errcheck // the client retries or counts a lost answer
	})
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		errc := make(chan error, 1)
		go func() { errc <- s.ActivateAndServe() }()
		select {
		case <-started:
		case err := <-errc:
			return "", fmt.Errorf("dns server: %w", err)
		}
	}
	return pc.LocalAddr().String(), nil
}

// mcpAnswer and modelAnswer are the origin's answers to a tools/call and
// a chat completion, each about 1 KiB.
var (
	mcpAnswer   = []byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"` + strings.Repeat("x", 960) + `"}]}}`)
	modelAnswer = []byte(`{"id":"c","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("x", 880) + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":250,"completion_tokens":220,"total_tokens":470}}`)
)
