package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/internal/testwait"
	"github.com/egressd/egressd/policy"
)

// startParkingServer is startServer with directions that park after
// parkAfter without bytes instead of a second.
func startParkingServer(t *testing.T, cfg Config, e policy.Decider, a audit.Appender, parkAfter time.Duration) string {
	t.Helper()
	_, addr := startServerWith(t, Options{Config: cfg, Decider: e, Audit: a, parkAfter: parkAfter})
	return addr
}

// tcpEchoUpstream echoes every connection it accepts until the test ends.
func tcpEchoUpstream(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			go func() {
				_, _ = io.Copy(c, c) // until the client's EOF, or the cleanup closes c
				c.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

// exchange writes msg through the tunnel and reads its echo.
func exchange(t *testing.T, c net.Conn, br *bufio.Reader, msg string) {
	t.Helper()
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
		t.Fatalf("echo of %q = %q, %v", msg, got, err)
	}
}

// Idle tunnels hold no goroutine: once their bytes stop, both directions
// park, and bytes sent later wake them and flow both ways; every tunnel
// still ends with its completion record and byte counts.
func TestIdleTunnelsParked(t *testing.T) {
	const n = 64
	a := &audittest.Recorder{}
	addr := startParkingServer(t, DefaultConfig(), allowAll{}, a, 20*time.Millisecond)
	up := tcpEchoUpstream(t)
	before := runtime.NumGoroutine()
	type tun struct {
		c  net.Conn
		br *bufio.Reader
	}
	tuns := make([]tun, n)
	for i := range tuns {
		c, br := openTunnel(t, addr, up, "")
		// Four bytes: no TLS record and no HTTP request, forwarded as
		// they are (TestReloadRevokesTunnels).
		exchange(t, c, br, "<pi>")
		tuns[i] = tun{c, br}
	}
	// No signal says a direction parked; the goroutine count is the
	// behaviour under test.
	testwait.For(t, "idle tunnels to park", 10*time.Second, func() error {
		// The echo upstream holds one per connection; the tunnels none.
		if extra := runtime.NumGoroutine() - before - n; extra > n/8 {
			return fmt.Errorf("%d goroutines beyond the upstream's for %d idle tunnels", extra, n)
		}
		return nil
	})
	for _, tu := range tuns {
		exchange(t, tu.c, tu.br, "<po>")
	}
	for _, tu := range tuns {
		tu.c.Close()
	}
	recs := a.Wait(t, func(recs []audit.Record) bool {
		return strings.Count(audittest.Summary(recs), "connect_done:") == n
	})
	for _, r := range recs {
		if r.Kind == audit.KindConnectDone && (r.BytesIn != 8 || r.BytesOut != 8 || r.Reason != "") {
			t.Errorf("completion record: in %d, out %d, reason %q; want 8, 8 and none", r.BytesIn, r.BytesOut, r.Reason)
		}
	}
}

// tlsOnlyAll allows every CONNECT for TLS only ("tls": true).
type tlsOnlyAll struct{}

func (tlsOnlyAll) Decide(context.Context, policy.Input) policy.Decision {
	return policy.Decision{Allow: true, TLS: true, Reason: "allowed", Rule: "all", Policy: "test"}
}

func (tlsOnlyAll) Digest() string { return "test" }

// A parked tunnel is still ended by its timers: the idle timeout, the
// maximum lifetime, and a TLS-only rule's wait for the first flight; each
// ends with one completion record.
func TestParkedTunnelTimers(t *testing.T) {
	tests := []struct {
		name   string
		engine policy.Decider
		cfg    func(*Config)
		// early is the first flight, echoed before the tunnel idles.
		early string
		// atLeast is how long the tunnel must stay open.
		atLeast    time.Duration
		wantRecord string
		wantDetail string
	}{
		{name: "idle timeout", engine: allowAll{}, early: "<pi>", atLeast: 300 * time.Millisecond,
			cfg:        func(c *Config) { c.TunnelIdleTimeout = 300 * time.Millisecond },
			wantRecord: "connect:allow:allowed,connect_done::"},
		{name: "idle timeout before a first flight", engine: allowAll{}, atLeast: 300 * time.Millisecond,
			cfg:        func(c *Config) { c.TunnelIdleTimeout = 300 * time.Millisecond },
			wantRecord: "connect:allow:allowed,connect_done::"},
		// Long enough that the echo of the first flight, under a loaded
		// CI machine, ends before the lifetime does (300 ms did not).
		{name: "maximum lifetime", engine: allowAll{}, early: "<pi>", atLeast: 2 * time.Second,
			cfg:        func(c *Config) { c.TunnelMaxLifetime = 2 * time.Second },
			wantRecord: "connect:allow:allowed,connect_done::"},
		{name: "TLS-only rule, no first flight", engine: tlsOnlyAll{}, atLeast: 300 * time.Millisecond,
			cfg: func(c *Config) { c.PeekTimeout = 300 * time.Millisecond },
			wantRecord: "connect:allow:allowed,connect:deny:" + string(policy.ReasonTLSRequired) +
				",connect_done:deny:" + string(policy.ReasonTLSRequired),
			wantDetail: "no first bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.cfg(&cfg)
			a := &audittest.Recorder{}
			addr := startParkingServer(t, cfg, tt.engine, a, 20*time.Millisecond)
			start := time.Now()
			c, br := openTunnel(t, addr, tcpEchoUpstream(t), "")
			if tt.early != "" {
				exchange(t, c, br, tt.early)
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err := br.ReadByte()
			if !errors.Is(err, io.EOF) {
				t.Fatalf("read from the idle tunnel = %v; want EOF once a timer ends it", err)
			}
			if d := time.Since(start); d < tt.atLeast {
				t.Errorf("tunnel ended after %v; want at least %v", d, tt.atLeast)
			}
			waitRecords(t, a, tt.wantRecord)
			if got := a.Last().Error; !strings.Contains(got, tt.wantDetail) {
				t.Errorf("completion record's error = %q; want it to contain %q", got, tt.wantDetail)
			}
		})
	}
}
