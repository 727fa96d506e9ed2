package pggate

import (
	"io"
	"net"
	"testing"
	"time"
)

// tcpPair is a connected loopback pair: the gate's side and the client's.
func tcpPair(t *testing.T) (gate, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	gate, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gate.Close(); client.Close() })
	return gate, client
}

// TestClientGoneEndsParseContext: a client that closes its connection
// while its statement is being parsed ends the parse's context.
func TestClientGoneEndsParseContext(t *testing.T) {
	gate, client := tcpPair(t)
	s := &session{client: gate}
	ctx, stop := s.clientGone()
	defer stop()
	client.Close()
	select {
	case <-ctx.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("context still live 20s after the client closed")
	}
}

// TestClientGoneLeavesSessionUsable: when the parse ends first, the watch
// stops without consuming anything and the session reads on as before.
func TestClientGoneLeavesSessionUsable(t *testing.T) {
	gate, client := tcpPair(t)
	s := &session{client: gate}
	ctx, stop := s.clientGone()
	if ctx.Err() != nil {
		t.Fatalf("context ended with the client still connected: %v", ctx.Err())
	}
	stop()
	if _, err := client.Write([]byte("Q")); err != nil {
		t.Fatal(err)
	}
	gate.SetReadDeadline(time.Now().Add(20 * time.Second))
	var b [1]byte
	if _, err := io.ReadFull(gate, b[:]); err != nil || b[0] != 'Q' {
		t.Fatalf("read after the watch = %q, %v; want Q", b[:], err)
	}
}
