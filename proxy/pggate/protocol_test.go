package pggate

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// rawClient logs in through the gate and hands back the raw connection so a
// test can send what no well-behaved driver would.
func rawClient(t *testing.T, f *fixture) (net.Conn, *pgproto3.Frontend) {
	t.Helper()
	c := connect(t, f.dsn("agent-ro", passRO, "app"))
	hc, err := c.Hijack()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hc.Conn.Close() })
	hc.Conn.SetDeadline(time.Now().Add(30 * time.Second))
	return hc.Conn, pgproto3.NewFrontend(hc.Conn, hc.Conn)
}

// sendFlushed sends msgs to the gate in one write.
func sendFlushed(t *testing.T, fe *pgproto3.Frontend, msgs ...pgproto3.FrontendMessage) {
	t.Helper()
	for _, m := range msgs {
		fe.Send(m)
	}
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
}

// receiveUntilReady collects messages up to ReadyForQuery.
func receiveUntilReady(t *testing.T, fe *pgproto3.Frontend) []pgproto3.BackendMessage {
	t.Helper()
	var out []pgproto3.BackendMessage
	for {
		m, err := fe.Receive()
		if err != nil {
			t.Fatalf("Receive: %v (after %d messages)", err, len(out))
		}
		switch m := m.(type) {
		case *pgproto3.ErrorResponse:
			cp := *m
			out = append(out, &cp)
		case *pgproto3.DataRow:
			// Values point into the receive buffer: copy them.
			cp := &pgproto3.DataRow{}
			for _, v := range m.Values {
				cp.Values = append(cp.Values, append([]byte(nil), v...))
			}
			out = append(out, cp)
		case *pgproto3.ReadyForQuery:
			out = append(out, &pgproto3.ReadyForQuery{TxStatus: m.TxStatus})
			return out
		default:
			out = append(out, m)
		}
	}
}

func wantErrorThenReady(t *testing.T, msgs []pgproto3.BackendMessage, reason string) {
	t.Helper()
	if len(msgs) != 2 {
		t.Fatalf("messages = %#v; want ErrorResponse, ReadyForQuery", msgs)
	}
	e, ok := msgs[0].(*pgproto3.ErrorResponse)
	if !ok || e.Code != "42501" || e.Message != "egressd: denied: "+reason {
		t.Fatalf("first message = %#v; want 42501 egressd: denied: %s", msgs[0], reason)
	}
	if r := msgs[1].(*pgproto3.ReadyForQuery); r.TxStatus != 'I' {
		t.Fatalf("ReadyForQuery status = %c; want I", r.TxStatus)
	}
}

func TestFunctionCallDenied(t *testing.T) {
	pg := sharedPG(t)
	f := startGate(t, pg, nil)
	_, fe := rawClient(t, f)
	sendFlushed(t, fe, &pgproto3.FunctionCall{Function: 2619, ResultFormatCode: 0})
	wantErrorThenReady(t, receiveUntilReady(t, fe), "function_call_denied")
}

func TestBindOfUnvettedStatementDenied(t *testing.T) {
	pg := sharedPG(t)
	f := startGate(t, pg, nil)
	_, fe := rawClient(t, f)
	sendFlushed(t, fe, &pgproto3.Bind{PreparedStatement: "never_parsed"}, &pgproto3.Execute{}, &pgproto3.Sync{})
	wantErrorThenReady(t, receiveUntilReady(t, fe), "statement_not_vetted")
	// A named statement that was vetted runs; after Close it is gone.
	sendFlushed(t, fe,
		&pgproto3.Parse{Name: "s1", Query: "SELECT name FROM users WHERE id = 1"},
		&pgproto3.Bind{PreparedStatement: "s1"},
		&pgproto3.Execute{},
		&pgproto3.Close{ObjectType: 'S', Name: "s1"},
		&pgproto3.Bind{PreparedStatement: "s1"},
		&pgproto3.Sync{},
	)
	msgs := receiveUntilReady(t, fe)
	var row string
	var errMsg string
	for _, m := range msgs {
		switch m := m.(type) {
		case *pgproto3.DataRow:
			row = string(m.Values[0])
		case *pgproto3.ErrorResponse:
			errMsg = m.Message
		}
	}
	if row != "ada" || errMsg != "egressd: denied: statement_not_vetted" {
		t.Fatalf("row = %q, error = %q; want ada, statement_not_vetted", row, errMsg)
	}
}

func TestPipelinedDenySkipsToSync(t *testing.T) {
	pg := sharedPG(t)
	f := startGate(t, pg, nil)
	_, fe := rawClient(t, f)
	sendFlushed(t, fe,
		&pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Bind{}, &pgproto3.Execute{},
		&pgproto3.Parse{Query: "SELECT pg_read_file('/etc/passwd')"}, &pgproto3.Bind{}, &pgproto3.Execute{},
		&pgproto3.Sync{},
		&pgproto3.Parse{Query: "SELECT 2"}, &pgproto3.Bind{}, &pgproto3.Execute{},
		&pgproto3.Sync{},
	)
	var kinds []string
	for _, m := range append(receiveUntilReady(t, fe), receiveUntilReady(t, fe)...) {
		switch m := m.(type) {
		case *pgproto3.ParseComplete:
			kinds = append(kinds, "parse")
		case *pgproto3.BindComplete:
			kinds = append(kinds, "bind")
		case *pgproto3.DataRow:
			kinds = append(kinds, "row:"+string(m.Values[0]))
		case *pgproto3.CommandComplete:
			kinds = append(kinds, "complete")
		case *pgproto3.ErrorResponse:
			kinds = append(kinds, "error:"+m.Message)
		case *pgproto3.ReadyForQuery:
			kinds = append(kinds, "ready")
		}
	}
	want := "parse bind row:1 complete error:egressd: denied: function_not_allowed ready parse bind row:2 complete ready"
	if got := strings.Join(kinds, " "); got != want {
		t.Fatalf("responses = %s\nwant        %s", got, want)
	}
}

// wantClosedWithError reads the gate's answer to a bad client: an
// ErrorResponse, then the connection closes.
func wantClosedWithError(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("gate kept a bad client open")
		}
	}
	if len(b) == 0 || b[0] != 'E' {
		t.Fatalf("answer = %q; want an ErrorResponse", b)
	}
}

func TestBadClientsEndOnlyThemselves(t *testing.T) {
	pg := sharedPG(t)
	f := startGate(t, pg, func(c *Config) { c.MaxMessageBytes = 1 << 16 })
	startup := func(version uint32) []byte {
		b := binary.BigEndian.AppendUint32(nil, 0)
		b = binary.BigEndian.AppendUint32(b, version)
		b = append(b, "user\x00agent-ro\x00\x00"...)
		binary.BigEndian.PutUint32(b, uint32(len(b)))
		return b
	}
	tests := []struct {
		name string
		send func(t *testing.T) net.Conn
	}{
		{"garbage startup", func(t *testing.T) net.Conn { return dialSend(t, f, []byte("GET / HTTP/1.1\r\n\r\n")) }},
		{"huge startup length", func(t *testing.T) net.Conn { return dialSend(t, f, []byte{0x7f, 0, 0, 0, 0, 3, 0, 0}) }},
		{"protocol 2.0", func(t *testing.T) net.Conn { return dialSend(t, f, startup(2<<16)) }},
		{"protocol 4.0", func(t *testing.T) net.Conn { return dialSend(t, f, startup(4<<16)) }},
		{"oversized message", func(t *testing.T) net.Conn {
			c, _ := rawClient(t, f)
			c.Write([]byte{'Q', 0x10, 0, 0, 0})
			return c
		}},
		{"unknown message type", func(t *testing.T) net.Conn {
			c, _ := rawClient(t, f)
			c.Write([]byte{'!', 0, 0, 0, 4})
			return c
		}},
		{"invalid utf-8 query", func(t *testing.T) net.Conn {
			c, fe := rawClient(t, f)
			fe.Send(&pgproto3.Query{String: "SELECT '\xff\xfe'"})
			fe.Flush()
			return c
		}},
		{"sasl after login", func(t *testing.T) net.Conn {
			c, fe := rawClient(t, f)
			fe.Send(&pgproto3.PasswordMessage{Password: "x"})
			fe.Flush()
			return c
		}},
	}
	keep := connect(t, f.dsn("agent-ro", passRO, "app"))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantClosedWithError(t, tt.send(t))
			if got := rows(t, keep, "SELECT count(*) FROM users"); got[0][0] != "3" {
				t.Fatalf("other session after a bad client = %v", got)
			}
		})
	}
}

func dialSend(t *testing.T, f *fixture, b []byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.Write(b)
	return c
}

func TestLoginRefusals(t *testing.T) {
	pg := sharedPG(t)
	f := startGate(t, pg, nil)
	tests := []struct {
		name, dsn, code, msg string
	}{
		{"wrong password", f.dsn("agent-ro", "nope", "app"), "28P01", "password authentication failed"},
		{"unknown identity", f.dsn("intruder", passRO, "app"), "28P01", "password authentication failed"},
		{"identity without profile", f.dsn("agent-none", passRO, "app"), "42501", "egressd: denied: sql_no_profile"},
		{"options parameter", f.dsn("agent-ro", passRO, "app") + " options='-c standard_conforming_strings=off'", "42501", "egressd: denied: startup_parameter_denied"},
		{"replication parameter", f.dsn("agent-ro", passRO, "app") + " replication=database", "42501", "egressd: denied: startup_parameter_denied"},
		{"role parameter", f.dsn("agent-ro", passRO, "app") + " role=postgres", "42501", "egressd: denied: startup_parameter_denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := pgconn.Connect(ctx, tt.dsn)
			if err == nil {
				c.Close(ctx)
				t.Fatalf("Connect succeeded; want %s", tt.code)
			}
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != tt.code || !strings.Contains(pe.Message, tt.msg) {
				t.Fatalf("Connect error = %v; want %s %q", err, tt.code, tt.msg)
			}
		})
	}
}

func TestAuditRecords(t *testing.T) {
	pg := sharedPG(t)
	f := startGate(t, pg, nil)
	c := connect(t, f.dsn("agent-ro", passRO, "app"))
	rows(t, c, "SELECT name FROM users WHERE name = 'grace' AND id = 2")
	_, _ = c.Exec(ctxT(t), "SELECT pg_read_file('/etc/shadow')").ReadAll() // denied; the audit is checked below
	var allow, deny bool
	for _, r := range f.audit.Records() {
		if strings.Contains(r.SQL, "grace") || strings.Contains(r.SQL, "shadow") {
			t.Errorf("audit SQL %q carries a literal", r.SQL)
		}
		if r.Kind != "sql" || r.Identity != "agent-ro" || r.Database != "app" || r.Policy == "" {
			t.Errorf("audit record = %+v; want kind sql, identity, database, policy", r)
		}
		switch {
		case r.Decision == "allow" && r.SQL == "SELECT name FROM users WHERE name = $1 AND id = $2":
			allow = r.Fingerprint != ""
		case r.Decision == "deny" && r.Reason == "function_not_allowed" && r.SQL == "SELECT pg_read_file($1)":
			deny = true
		}
	}
	if !allow || !deny {
		t.Fatalf("audit records %+v; want the allowed SELECT with a fingerprint and the denied pg_read_file", f.audit.Records())
	}
	// With the audit log failing, every statement is denied.
	f.audit.SetFail(true)
	_, err := c.Exec(ctxT(t), "SELECT 1").ReadAll()
	f.audit.SetFail(false)
	wantDenied(t, err, "audit_unavailable")
}

func TestPsqlClient(t *testing.T) {
	pg := sharedPG(t)
	f := startGate(t, pg, nil)
	host, port, _ := net.SplitHostPort(f.addr)
	run := func(sql string) (string, string, error) {
		cmd := exec.Command(pg.Bin("psql"), "-X", "-A", "-t", "-h", host, "-p", port, "-U", "agent-ro", "-d", "app", "-c", sql)
		cmd.Env = append(os.Environ(), "PGPASSWORD="+passRO, "PGSSLMODE=prefer")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	out, stderr, err := run("SELECT name FROM users ORDER BY id")
	if err != nil || out != "ada\ngrace\nedsger\n" {
		t.Fatalf("psql select = %q, %v (%s); want ada grace edsger", out, err, stderr)
	}
	_, stderr, err = run("COPY users TO STDOUT")
	if err == nil || !strings.Contains(stderr, "egressd: denied: copy_table_denied") {
		t.Fatalf("psql COPY = %v, %q; want denied copy_table_denied", err, stderr)
	}
}

func TestUpstreamRestart(t *testing.T) {
	srv := pgtestStart(t)
	f := startGate(t, srv, nil)
	c := connect(t, f.dsn("agent-ro", passRO, "postgres"))
	rows(t, c, "SELECT 1")
	srv.Stop()
	if _, err := c.Exec(ctxT(t), "SELECT 1").ReadAll(); err == nil {
		t.Fatal("query after upstream stop succeeded")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := pgconn.Connect(ctx, f.dsn("agent-ro", passRO, "postgres")); err == nil {
		t.Fatal("login with the upstream down succeeded")
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	c2 := connect(t, f.dsn("agent-ro", passRO, "postgres"))
	if got := rows(t, c2, "SELECT 1"); got[0][0] != "1" {
		t.Fatalf("query after upstream restart = %v", got)
	}
}
