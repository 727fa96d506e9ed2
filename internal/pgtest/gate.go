package pgtest

import (
	"context"
	"net"
	"testing"
	"time"
)

// Gate is what ServeGate serves: a *pggate.Gate, named by its methods
// because pggate's own tests import this package.
type Gate interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
}

// ServeGate serves g on a loopback port until the test ends and returns
// its address. Serve and Shutdown are checked by the gate's own lifecycle
// tests; here they only start and stop a fixture.
func ServeGate(t testing.TB, g Gate) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Shutdown(ctx)
	})
	return ln.Addr().String()
}
