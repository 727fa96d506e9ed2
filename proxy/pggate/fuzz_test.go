package pggate

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/audit/audittest"
	"github.com/egressd/egressd/policy"
)

// fuzzGate is a gate whose upstream is never dialled: the fuzz targets
// build sessions on in-memory pipes, so they need no PostgreSQL.
func fuzzGate(t testing.TB) *Gate {
	t.Helper()
	g, _ := auditedFuzzGate(t)
	return g
}

// auditedFuzzGate is fuzzGate and the recorder that takes its records.
func auditedFuzzGate(t testing.TB) (*Gate, *audittest.Recorder) {
	t.Helper()
	g, rec, _ := dialCountingFuzzGate(t)
	return g, rec
}

// dialCountingFuzzGate is auditedFuzzGate and the count of its upstream
// dials (each fails).
func dialCountingFuzzGate(t testing.TB) (*Gate, *audittest.Recorder, *atomic.Int64) {
	t.Helper()
	rec := &audittest.Recorder{}
	dials := &atomic.Int64{}
	cfg := DefaultConfig()
	cfg.Listen = "127.0.0.1:0"
	cfg.Upstream = "postgres://gate@127.0.0.1:1/"
	cfg.MaxMessageBytes = 1 << 16
	g, err := New(cfg, Deps{
		Engine: testEngine(t), Identities: testIdentities(t), Audit: rec,
		Dial: func(context.Context, string, string) (net.Conn, error) {
			dials.Add(1)
			return nil, io.ErrClosedPipe
		},
		Log: zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return g, rec, dials
}

// stubUpstream answers like a server: each marker statement fails with the
// syntax error PostgreSQL gives, everything else succeeds. Every query
// text that arrives (simple Query and Parse) goes to got, when not nil: it
// is the witness of what passed the gate.
func stubUpstream(c net.Conn, marker string, got *[]string) {
	defer c.Close()
	be := pgproto3.NewBackend(c, c)
	skipping := false
	for {
		msg, err := be.Receive()
		if err != nil {
			return
		}
		switch m := msg.(type) {
		case *pgproto3.Query:
			if got != nil {
				*got = append(*got, m.String)
			}
			if strings.HasPrefix(m.String, marker) {
				be.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "42601", Message: `syntax error at or near "` + m.String + `"`})
			} else {
				be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})
			}
			be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		case *pgproto3.Parse:
			if got != nil {
				*got = append(*got, m.Query)
			}
			if skipping {
				continue
			}
			if strings.HasPrefix(m.Query, marker) {
				be.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "42601", Message: `syntax error at or near "` + m.Query + `"`})
				skipping = true
			} else {
				be.Send(&pgproto3.ParseComplete{})
			}
		case *pgproto3.Bind:
			if !skipping {
				be.Send(&pgproto3.BindComplete{})
			}
		case *pgproto3.Execute:
			if !skipping {
				be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})
			}
		case *pgproto3.Sync:
			skipping = false
			be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
		case *pgproto3.Terminate:
			return
		}
		if be.Flush() != nil {
			return
		}
	}
}

// runSession feeds data to a logged-in agent-ro session (profile
// read_only) as its client's bytes and returns the query texts that
// reached the upstream.
func runSession(t testing.TB, g *Gate, data []byte) []string {
	client, s, wait := pipeSession(t, g)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); io.Copy(io.Discard, client) }()
	go func() {
		defer wg.Done()
		client.Write(data)
		client.Close()
	}()
	s.run()
	wg.Wait()
	return wait()
}

// pipeSession is a logged-in agent-ro session (profile read_only) on
// in-memory pipes, its upstream the stub, not yet running; client is its
// client's end. wait waits for the stub to end (the session's run must
// have returned) and returns the query texts that reached it.
func pipeSession(t testing.TB, g *Gate) (client net.Conn, s *session, wait func() []string) {
	// Logged in as startup logs in (identity, verifier and table from the
	// gate's current state): a session without them reads as revoked and
	// is refused at its first message.
	cur := g.cur.Load()
	entry, ident, ok := cur.ids.Lookup("agent-ro")
	if !ok {
		t.Fatal("the test identities have no agent-ro")
	}
	client, gateSide := net.Pipe()
	gateUp, up := net.Pipe()
	s = &session{
		g: g, cur: cur, verifier: entry.SCRAMSHA256, client: gateSide, be: g.newBackend(gateSide), upstream: gateUp,
		fe:       pgproto3.NewFrontend(gateUp, gateUp),
		identity: ident, database: "app", remote: "fuzz", stmts: map[string]struct{}{}, objs: newObjects(),
	}
	s.keyPrefix = cacheKeyPrefix(s.identity, s.database)
	var got []string
	done := make(chan struct{})
	go func() { defer close(done); stubUpstream(up, g.marker, &got) }()
	return client, s, func() []string { <-done; return got }
}

func encode(msgs ...pgproto3.FrontendMessage) []byte {
	var b []byte
	for _, m := range msgs {
		b, _ = m.Encode(b)
	}
	return b
}

func FuzzSession(f *testing.F) {
	f.Add(encode(&pgproto3.Query{String: "SELECT name FROM users"}))
	f.Add(encode(&pgproto3.Query{String: "SELECT pg_read_file('x')"}, &pgproto3.Query{String: "SELECT 1"}))
	f.Add(encode(&pgproto3.Parse{Name: "a", Query: "SELECT 1"}, &pgproto3.Bind{PreparedStatement: "a"}, &pgproto3.Execute{}, &pgproto3.Sync{}))
	f.Add(encode(&pgproto3.Parse{Query: "DELETE FROM t"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}, &pgproto3.Terminate{}))
	f.Add(encode(&pgproto3.FunctionCall{Function: 1}, &pgproto3.Bind{PreparedStatement: "x"}, &pgproto3.Flush{}, &pgproto3.Sync{}))
	f.Add([]byte{'Q', 0, 0, 0, 3})
	f.Add(encode(&pgproto3.Query{String: "BEGIN"}, &pgproto3.Query{String: "DELETE FROM users"}, &pgproto3.Query{String: "COMMIT"}))
	f.Add(encode(&pgproto3.Query{String: "SELECT 1; INSERT INTO users VALUES (1)"}, &pgproto3.Query{String: "SELECT lower('A')"}))
	g, rec := auditedFuzzGate(f)
	w := newReadOnlyWitness(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		// Fuzz inputs run one after another in a worker process, so the
		// records since n are this session's.
		n := rec.Len()
		arrived := runSession(t, g, data)
		if err := w.check(g, arrived, rec.Since(n)); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzStartup(f *testing.F) {
	startup := func(params string) []byte {
		b := []byte{0, 0, 0, 0, 0, 3, 0, 0}
		b = append(b, params...)
		b[3] = byte(len(b))
		return b
	}
	f.Add(startup("user\x00agent-ro\x00database\x00app\x00\x00"))
	f.Add(startup("user\x00agent-ro\x00options\x00-c x=y\x00\x00"))
	f.Add([]byte{0, 0, 0, 8, 4, 210, 22, 47})
	f.Add([]byte{0, 0, 0, 16, 4, 210, 22, 46, 0, 0, 0, 1, 0, 0, 0, 2})
	f.Add(startup("user\x00nobody\x00\x00"))
	f.Add(append([]byte{0, 0, 0, 8, 4, 210, 22, 47}, startup("database\x00app\x00\x00")...))
	g, rec, dials := dialCountingFuzzGate(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		// Fuzz inputs run one after another in a worker process, so the
		// records and dials since these are this connection's.
		n, dialed := rec.Len(), dials.Load()
		g.serveConn(newScriptConn(data))
		// A fixed byte stream cannot answer the SCRAM challenge (the
		// server's nonce is fresh), so no login here succeeds: nothing may
		// reach the upstream, and every startup packet is a refused login,
		// recorded once, with a declared reason.
		if d := dials.Load() - dialed; d != 0 {
			t.Errorf("serveConn(%q) dialled the upstream %d times without a SCRAM login", data, d)
		}
		want := 0
		if reachesLogin(g, data) {
			want = 1
		}
		recs := rec.Since(n)
		if len(recs) != want {
			t.Fatalf("serveConn(%q) audited %s; want %d refused login", data, audittest.Summary(recs), want)
		}
		for _, r := range recs {
			if r.Kind != audit.KindSQL || r.Decision != audit.DecisionDeny || !policy.Reason(r.Reason).Declared() {
				t.Errorf("serveConn(%q) audited %s; want a sql deny with a declared reason", data, audittest.Summary(recs))
			}
		}
	})
}

// scriptConn is a client that sends its script, then half-closes: its
// reads end at the script's end, and what the gate writes is dropped but
// never refused, so how far the gate gets depends on the bytes alone, not
// on when a pipe's other end closed. Deadlines and addresses are a pipe's.
type scriptConn struct {
	net.Conn
	script *bytes.Reader
}

func newScriptConn(script []byte) *scriptConn {
	c, other := net.Pipe()
	other.Close()
	return &scriptConn{Conn: c, script: bytes.NewReader(script)}
}

func (c *scriptConn) Read(b []byte) (int, error)  { return c.script.Read(b) }
func (c *scriptConn) Write(b []byte) (int, error) { return len(b), nil }

// reachesLogin reports whether data, as a client's first bytes, carries a
// startup packet the gate goes on to log in with, read by the protocol
// library as serveConn reads it: past SSL and GSS requests (refused, the
// fuzz gate has no TLS), not after a cancel request or a malformed packet.
func reachesLogin(g *Gate, data []byte) bool {
	be := pgproto3.NewBackend(bytes.NewReader(data), io.Discard)
	be.SetMaxBodyLen(g.cfg.MaxMessageBytes)
	for {
		msg, err := be.ReceiveStartupMessage()
		if err != nil {
			return false
		}
		switch msg.(type) {
		case *pgproto3.CancelRequest:
			return false
		case *pgproto3.StartupMessage:
			return true
		}
	}
}
