package pggate

import (
	"bytes"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/egressd/egressd/policy"
)

// countingConn counts the writes made to a connection.
type countingConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// TestCopyDataBatchedUpstream: COPY FROM STDIN rows that arrive together
// reach the server in a few writes, not one system call per row, and
// byte for byte as the client sent them. (Issue 16: gate CPU.)
func TestCopyDataBatchedUpstream(t *testing.T) {
	const rows = 2000
	msgs := make([]pgproto3.FrontendMessage, 0, rows+2)
	for i := range rows {
		msgs = append(msgs, &pgproto3.CopyData{Data: []byte(strconv.Itoa(i) + "\tname\n")})
	}
	msgs = append(msgs, &pgproto3.CopyDone{}, &pgproto3.Terminate{})
	data := encode(msgs...)

	g := fuzzGate(t)
	client, gateSide := net.Pipe()
	gateUp, up := net.Pipe()
	counted := &countingConn{Conn: gateUp}
	s := &session{
		g: g, cur: g.cur.Load(), client: gateSide, be: g.newBackend(gateSide), upstream: counted,
		fe:       pgproto3.NewFrontend(counted, counted),
		identity: policy.Identity{ID: "agent-rw", Attributes: map[string]string{"sql_profile": "read_write"}},
		database: "app", remote: "test", stmts: map[string]struct{}{}, objs: newObjects(),
	}
	s.keyPrefix = cacheKeyPrefix(s.identity, s.database)
	var got bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); io.Copy(&got, up) }()
	go func() { defer wg.Done(); io.Copy(io.Discard, client) }()
	go func() {
		defer wg.Done()
		client.Write(data)
	}()
	s.run()
	client.Close()
	wg.Wait()

	if !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("upstream got %d bytes; want the client's %d, unchanged", got.Len(), len(data))
	}
	// Each flush is one write (net.Pipe does not split them): at most one
	// per relayBufSize of rows, plus CopyDone's and Terminate's.
	if n, most := counted.writes.Load(), int64(len(data)/relayBufSize+2); n > most {
		t.Errorf("upstream writes for %d rows = %d; want at most %d", rows, n, most)
	}
}

// TestCopyFromThroughGate: a COPY FROM STDIN of many rows, batched on its
// way up, reaches PostgreSQL whole (inside a transaction rolled back, so
// the shared tables stay as they are).
func TestCopyFromThroughGate(t *testing.T) {
	f := startGate(t, sharedPG(t), nil)
	c := connect(t, f.dsn("agent-rw", passRW, "app"))
	if _, err := c.Exec(ctxT(t), "BEGIN").ReadAll(); err != nil {
		t.Fatal(err)
	}
	const rows = 5000
	var in bytes.Buffer
	for i := range rows {
		in.WriteString(strconv.Itoa(100000+i) + "\tnote " + strconv.Itoa(i) + "\n")
	}
	tag, err := c.CopyFrom(ctxT(t), &in, "COPY items FROM STDIN")
	if err != nil {
		t.Fatalf("COPY items FROM STDIN = %v; want %d rows copied", err, rows)
	}
	if tag.RowsAffected() != rows {
		t.Errorf("COPY copied %d rows; want %d", tag.RowsAffected(), rows)
	}
	res, err := c.Exec(ctxT(t), "SELECT count(*) FROM items WHERE id >= 100000; ROLLBACK").ReadAll()
	if err != nil || len(res) != 2 || len(res[0].Rows) != 1 || string(res[0].Rows[0][0]) != strconv.Itoa(rows) {
		t.Fatalf("count after COPY = %v, %v; want %d", res, err, rows)
	}
}
