package dnsguard

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/egressd/egressd/dnsguard/dnstest"
)

// countingListener accepts on addr ("127.0.0.x:0") and counts connections.
type countingListener struct {
	ln    net.Listener
	count atomic.Int64
}

func listenCounting(t *testing.T, addr string) *countingListener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	cl := &countingListener{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			cl.count.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return cl
}

func (cl *countingListener) port() uint16 {
	return uint16(cl.ln.Addr().(*net.TCPAddr).Port)
}

// TestDialerRebinding serves a TTL-0 name that alternates between an allowed
// loopback address and a forbidden one: every dial that saw the forbidden
// answer is refused, and the forbidden listener never sees a connection.
func TestDialerRebinding(t *testing.T) {
	allowed := listenCounting(t, "127.0.0.2:0")
	port := allowed.port()
	forbidden := listenCounting(t, "127.0.0.3:"+strconv.Itoa(int(port)))
	srv := dnstest.Start(t)
	srv.Set("rebind.test", dnstest.Entry{Answers: [][]string{
		{"rebind.test. 0 IN A 127.0.0.2"},
		{"rebind.test. 0 IN A 127.0.0.3"},
	}})
	srv.Set("rebind-meta.test", dnstest.Entry{Answers: [][]string{
		{"rebind-meta.test. 0 IN A 127.0.0.2"},
		{"rebind-meta.test. 0 IN A 169.254.169.254"},
	}})
	r, floor := newTestResolver(t, testConfig(srv.Addr()), InternalConfig{{CIDR: "127.0.0.2", Ports: []uint16{port}, Action: "allow"}})
	d := NewDialer(r, floor, 0)

	for _, c := range []struct {
		host, reason string
	}{
		{"rebind.test", "loopback_address"},
		{"rebind-meta.test", "metadata_address"},
	} {
		var ok, denied int
		for range 10 {
			conn, err := d.DialContext(context.Background(), "tcp", net.JoinHostPort(c.host, strconv.Itoa(int(port))))
			switch reason := denyReason(err); reason {
			case "":
				ok++
				conn.Close()
			case c.reason:
				denied++
			default:
				t.Fatalf("DialContext(%s) = %v; want success or %s", c.host, err, c.reason)
			}
		}
		if ok != 5 || denied != 5 {
			t.Errorf("%s: %d dials succeeded, %d denied; want 5 and 5", c.host, ok, denied)
		}
	}
	if n := forbidden.count.Load(); n != 0 {
		t.Errorf("forbidden listener saw %d connections; want 0", n)
	}
	if n := allowed.count.Load(); n == 0 {
		t.Error("allowed listener saw no connection")
	}
}

func TestDialer(t *testing.T) {
	up := listenCounting(t, "127.0.0.2:0")
	port := up.port()
	down, err := net.Listen("tcp", "127.0.0.4:0")
	if err != nil {
		t.Fatal(err)
	}
	downPort := down.Addr().(*net.TCPAddr).Port
	down.Close() // 127.0.0.4:downPort refuses connections now

	srv := dnstest.Start(t)
	srv.SetRR("svc.test", "svc.test. 60 IN A 127.0.0.2")
	srv.SetRR("failover.test", "failover.test. 60 IN A 127.0.0.4", "failover.test. 60 IN A 127.0.0.2")
	srv.SetRR("denied.test", "denied.test. 60 IN A 127.0.0.5")
	internal := InternalConfig{
		{CIDR: "127.0.0.0/29", Ports: []uint16{port, uint16(downPort)}, Action: "allow"},
		{CIDR: "127.0.0.5/32", Action: "deny"},
	}
	r, floor := newTestResolver(t, testConfig(srv.Addr()), internal)
	d := NewDialer(r, floor, 0)
	p := strconv.Itoa(int(port))
	tests := []struct {
		name    string
		network string
		address string
		reason  string
		dialErr bool
	}{
		{name: "name", network: "tcp", address: "svc.test:" + p},
		{name: "tcp4", network: "tcp4", address: "svc.test:" + p},
		{name: "no tcp6 address", network: "tcp6", address: "svc.test:" + p, reason: "dns_no_address"},
		{name: "ip literal", network: "tcp", address: "127.0.0.2:" + p},
		{name: "mapped literal", network: "tcp", address: "[::ffff:127.0.0.2]:" + p},
		{name: "next address on failure", network: "tcp", address: "failover.test:" + p},
		{name: "port not allowed", network: "tcp", address: "svc.test:22", reason: "internal_port_not_allowed"},
		{name: "deny beats allow", network: "tcp", address: "denied.test:" + p, reason: "internal_denied"},
		{name: "metadata literal", network: "tcp", address: "169.254.169.254:80", reason: "metadata_address"},
		{name: "nat64 metadata literal", network: "tcp", address: "[64:ff9b::169.254.169.254]:80", reason: "metadata_address"},
		{name: "private literal", network: "tcp", address: "10.0.0.1:80", reason: "private_address"},
		{name: "metadata name", network: "tcp", address: "metadata.google.internal:80", reason: "metadata_name"},
		{name: "port zero", network: "tcp", address: "svc.test:0", reason: "invalid_port"},
		{name: "no port", network: "tcp", address: "svc.test", reason: "malformed_address"},
		{name: "refused connection", network: "tcp", address: fmt.Sprintf("127.0.0.4:%d", downPort), dialErr: true},
		{name: "udp", network: "udp", address: "svc.test:" + p, dialErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := d.DialContext(context.Background(), tt.network, tt.address)
			if tt.dialErr {
				if err == nil || denyReason(err) != "not a deny: "+err.Error() {
					t.Fatalf("DialContext(%s, %s) = %v; want a dial error that is not a deny", tt.network, tt.address, err)
				}
				return
			}
			if reason := denyReason(err); reason != tt.reason {
				t.Fatalf("DialContext(%s, %s) = %v; want reason %q", tt.network, tt.address, err, tt.reason)
			}
			if err != nil {
				return
			}
			defer conn.Close()
			if conn.RemoteAddr().String() != "127.0.0.2:"+p {
				t.Errorf("DialContext(%s) connected to %s; want 127.0.0.2:%s", tt.address, conn.RemoteAddr(), p)
			}
		})
	}
}

func TestDialerControlRechecks(t *testing.T) {
	floor, _ := NewFloor(nil)
	d := NewDialer(nil, floor, 0)
	for _, c := range []struct{ addr, reason string }{
		{"169.254.169.254:80", "metadata_address"},
		{"[::ffff:10.0.0.1]:80", "private_address"},
		{"192.0.43.10:443", ""},
		{"garbage", "malformed_address"},
	} {
		err := d.control(context.Background(), "tcp4", c.addr, nil)
		if got := denyReason(err); got != c.reason {
			t.Errorf("control(%s) = %v; want reason %q", c.addr, err, c.reason)
		}
	}
}
