package pggate

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/testwait"
)

// TestShutdownCutsIdleSessionsWithMessageAndRecord: a drain stops the
// gate's logins at once, and a session still open at its deadline is told
// as PostgreSQL tells its clients at a shutdown (FATAL 57P01) and recorded
// with reason shutting_down; before, it was closed with no message and no
// record.
func TestShutdownCutsIdleSessionsWithMessageAndRecord(t *testing.T) {
	f := startGate(t, sharedPG(t), nil)
	c := connect(t, f.dsn("agent-ro", passRO, "app"))
	rows(t, c, "SELECT id FROM users")
	hc, err := c.Hijack()
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Conn.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.gate.Shutdown(ctx) }()

	// The listener closes as the drain starts; polled because Shutdown
	// runs in its own goroutine.
	testwait.For(t, "the gate to refuse new clients once the drain starts", 10*time.Second, func() error {
		nc, err := net.DialTimeout("tcp", f.addr, time.Second)
		if err != nil {
			return nil
		}
		nc.Close()
		return fmt.Errorf("gate at %s still accepts", f.addr)
	})

	cancel() // the drain's deadline
	hc.Conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	msg, err := hc.Frontend.Receive()
	if err != nil {
		t.Fatalf("idle session at the drain deadline: %v; want FATAL 57P01 first", err)
	}
	e, ok := msg.(*pgproto3.ErrorResponse)
	if !ok || e.Severity != "FATAL" || e.Code != "57P01" {
		t.Fatalf("idle session at the drain deadline got %#v; want FATAL 57P01", msg)
	}
	if err := <-done; err == nil {
		t.Errorf("Shutdown past its deadline = nil; want the context's error")
	}
	f.audit.WaitRecord(t, func(r audit.Record) bool {
		return r.Kind == audit.KindSQL && r.Identity == "agent-ro" && r.Reason == "shutting_down" && r.Decision == audit.DecisionDeny
	})
}

// TestReadyFollowsUpstream: the gate is ready while its upstream accepts
// connections and says which upstream when it does not (/readyz stayed 200
// with the upstream down).
func TestReadyFollowsUpstream(t *testing.T) {
	f := startGate(t, sharedPG(t), nil)
	if err := f.gate.Ready(ctxT(t)); err != nil {
		t.Errorf("Ready() with the upstream up = %v; want nil", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	down := startGate(t, sharedPG(t), func(c *Config) { c.Upstream = "postgres://nobody@" + closed + "/?sslmode=disable" })
	if err := down.gate.Ready(ctxT(t)); err == nil || !strings.Contains(err.Error(), closed) {
		t.Errorf("Ready() with nothing at %s = %v; want an error naming it", closed, err)
	}
}
