package pggate

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/egressd/egressd/policy"
)

// heapInUse is the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Clients that do not read a large result hold the server back, not the
// gate's memory (issue 12 item 5: two sessions not reading
// `SELECT repeat('x', 250000000)` cost about 1 GB).
func TestRelayMemoryBoundedWhenClientDoesNotRead(t *testing.T) {
	pg := sharedPG(t)
	f := startGate(t, pg, nil)
	direct := connect(t, pg.DSN("app"))
	const rowBytes = 100_000_000
	query := fmt.Sprintf("SELECT repeat('x', %d) AS relay_bound_test", rowBytes)
	base := heapInUse()
	for range 2 {
		conn, fe := rawClient(t, f)
		sendFlushed(t, fe, &pgproto3.Query{String: query})
		_ = conn // never read
	}
	// Wait until the server has either finished sending both rows (the
	// gate took them all) or is blocked writing to the gate (the gate
	// stopped reading): the state that shows where the bytes are.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		got := rows(t, direct, `SELECT count(*) FROM pg_stat_activity
			WHERE query LIKE 'SELECT repeat%relay_bound_test' AND (wait_event = 'ClientWrite' OR state = 'idle')`)
		if got[0][0] == "2" {
			break
		}
		if i > 3000 {
			t.Fatalf("server sessions stalled or done = %s after %d polls; want 2", got[0][0], i)
		}
		<-tick.C
	}
	grown := int64(heapInUse()) - int64(base)
	t.Logf("gate heap growth with two unread %d MB rows: %d KiB", rowBytes/1_000_000, grown>>10)
	if grown > 32<<20 {
		t.Fatalf("gate heap grew %d MiB with two %d MB rows unread; want < 32 MiB", grown>>20, rowBytes/1_000_000)
	}
}

// A large row still arrives whole, streamed in chunks.
func TestRelayStreamsLargeRow(t *testing.T) {
	f := startGate(t, sharedPG(t), nil)
	c := connect(t, f.dsn("agent-ro", passRO, "app"))
	got := rows(t, c, "SELECT repeat('ab', 3000000), 'tail'")
	if len(got) != 1 || got[0][0] != strings.Repeat("ab", 3000000) || got[0][1] != "tail" {
		t.Fatalf("large row through the gate: %d rows, first value %d bytes; want one row of 6000000 bytes and 'tail'", len(got), len(got[0][0]))
	}
	// The session goes on with the denial markers rewritten as before.
	wantQueryDenied(t, c, "SELECT pg_read_file('/etc/passwd')", "function_not_allowed")
}

// A row over max_upstream_message_bytes ends the session with an error
// that names the key, before any of it reaches the client.
func TestRelayRefusesRowOverMaxUpstreamMessage(t *testing.T) {
	f := startGate(t, sharedPG(t), func(c *Config) { c.MaxUpstreamMessageBytes = 1 << 20 })
	c := connect(t, f.dsn("agent-ro", passRO, "app"))
	_, err := c.Exec(ctxT(t), "SELECT repeat('x', 2000000)").ReadAll()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "54000" || !strings.Contains(pe.Message, "postgres.max_upstream_message_bytes") {
		t.Fatalf("row over the limit = %v; want 54000 naming postgres.max_upstream_message_bytes", err)
	}
}

// FuzzRelay feeds arbitrary server bytes through the relay. What the client
// receives is framed: whole messages, the server's own apart from rewritten
// errors and the gate's closing error, and at most one cut short at the
// end when the server's bytes end inside it.
func FuzzRelay(f *testing.F) {
	g := fuzzGate(f)
	g.cfg.MaxUpstreamMessageBytes = 1 << 16
	row, _ := (&pgproto3.DataRow{Values: [][]byte{[]byte("x")}}).Encode(nil)
	rfq, _ := (&pgproto3.ReadyForQuery{TxStatus: 'I'}).Encode(nil)
	marker, _ := (&pgproto3.ErrorResponse{Severity: "ERROR", Code: "42601", Message: `syntax error at or near "` + g.marker + `write_denied"`}).Encode(nil)
	ps, _ := (&pgproto3.ParameterStatus{Name: "client_encoding", Value: "SJIS"}).Encode(nil)
	f.Add(append(append([]byte{}, row...), rfq...))
	f.Add(append(append([]byte{}, marker...), rfq...))
	f.Add(append(append([]byte{}, row...), ps...))
	f.Add(append(append([]byte{}, row...), row[:7]...))
	f.Add([]byte{'D', 0x7f, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, up []byte) {
		client, gateSide := net.Pipe()
		gateUp, server := net.Pipe()
		s := &session{g: g, client: gateSide, be: g.newBackend(gateSide), upstream: gateUp,
			identity: policy.Identity{ID: "fuzz"}, remote: "fuzz", objs: newObjects(), closed: make(chan struct{})}
		s.cw = bufio.NewWriterSize(gateSide, relayBufSize)
		go func() {
			server.Write(up)
			server.Close()
		}()
		go s.relay()
		got, _ := io.ReadAll(client)
		// The server's messages, in order.
		var want [][]byte
		for rest := up; len(rest) >= 5; {
			n := int(binary.BigEndian.Uint32(rest[1:5])) + 1
			if n < 5 || n > len(rest) {
				break
			}
			want = append(want, rest[:n])
			rest = rest[n:]
		}
		i := 0
		for rest := got; len(rest) > 0; {
			if len(rest) < 5 {
				t.Fatalf("client got a cut header %q", rest)
			}
			n := int(binary.BigEndian.Uint32(rest[1:5])) + 1
			if n < 5 {
				t.Fatalf("client got a bad length in %q", rest[:5])
			}
			if n > len(rest) {
				// Cut short: only the last, and only a server message.
				if i != len(want) || !bytes.HasPrefix(up[len(bytes.Join(want, nil)):], rest) {
					t.Fatalf("client got a cut message %q that is not the server's", rest)
				}
				return
			}
			m := rest[:n]
			rest = rest[n:]
			switch {
			case i < len(want) && bytes.Equal(m, want[i]):
				i++
			case m[0] == 'E' && i < len(want) && want[i][0] == 'E':
				i++ // a rewritten denial
			case m[0] == 'E' && len(rest) == 0:
				// the gate's closing error
			default:
				t.Fatalf("client message %d %q is not the server's next %q", i, m, want[min(i, len(want)-1):])
			}
		}
	})
}
