package pggate

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlfacts"
)

// denyTable decides as inner does, except that any statement reading or
// writing table is denied table_not_allowed: a bundle reloaded with a
// narrower read list.
type denyTable struct {
	inner policy.Decider
	table string
}

func (d denyTable) Decide(ctx context.Context, in policy.Input) policy.Decision {
	if st, ok := in.Facts.(*sqlfacts.Statement); ok {
		for s := st; s != nil; s = s.Inner {
			for _, r := range s.Relations {
				if r.Name == d.table {
					return policy.Decision{Reason: "table_not_allowed", Policy: d.Digest()}
				}
			}
		}
	}
	return d.inner.Decide(ctx, in)
}

func (d denyTable) Digest() string { return "sha256:deny-" + d.table }

// narrowToReadOnly reloads the gate with agent-rw's profile narrowed to
// read_only, as an operator's reload would.
func narrowToReadOnly(t *testing.T, f *fixture) {
	t.Helper()
	v, err := testVerifiers()
	if err != nil {
		t.Fatal(err)
	}
	ids, err := identity.New(identity.Config{
		{ID: "agent-rw", SCRAMSHA256: v[1], Attributes: map[string]string{"sql_profile": "read_only"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.gate.Reload(testEngine(t), ids)
}

// seedItem puts row id into items directly and returns a check that it is
// still there.
func seedItem(t *testing.T, f *fixture, id int) func() {
	t.Helper()
	direct := connect(t, f.srv.DSN("app"))
	rows(t, direct, fmt.Sprintf("INSERT INTO items VALUES (%d, 'keep') ON CONFLICT DO NOTHING", id))
	t.Cleanup(func() { rows(t, direct, fmt.Sprintf("DELETE FROM items WHERE id = %d", id)) })
	return func() {
		t.Helper()
		if got := rows(t, direct, fmt.Sprintf("SELECT count(*) FROM items WHERE id = %d", id)); got[0][0] != "1" {
			t.Fatalf("row %d deleted through a statement prepared before the profile was narrowed", id)
		}
	}
}

// Prepared statements and cursors made before a reload are decided again
// under the new policy (issue 12 item 2: after a downgrade to read_only,
// EXECUTE del(0) still deleted rows, so did a protocol-level prepared
// DELETE, and a WITH HOLD cursor kept fetching).
func TestReloadRevokesPreparedStatementsAndCursors(t *testing.T) {
	t.Run("sql prepare", func(t *testing.T) {
		f := startGate(t, sharedPG(t), nil)
		intact := seedItem(t, f, 901)
		c := connect(t, f.dsn("agent-rw", passRW, "app"))
		rows(t, c, "PREPARE del(int) AS DELETE FROM items WHERE id = $1")
		narrowToReadOnly(t, f)
		before := len(f.audit.Records())
		// PostgreSQL ends a -- comment at a lone CR: the EXECUTE after
		// one is a use too (issue 21 item 1).
		for _, q := range []string{"EXECUTE del(901)", "SELECT 1; EXECUTE del(901)", "execute DEL (901)", "SELECT 1 --x\r; EXECUTE del(901)"} {
			wantQueryDenied(t, c, q, "write_denied")
		}
		intact()
		// The re-decision and each refused use are audited.
		var redecided, uses int
		for _, r := range f.audit.Records()[before:] {
			switch {
			case r.Decision == "deny" && r.Reason == "write_denied" && strings.Contains(r.SQL, "DELETE FROM items"):
				redecided++
			case r.Decision == "deny" && r.Reason == "write_denied" && r.SQL == "":
				uses++
			}
		}
		if redecided != 1 || uses != 4 {
			t.Errorf("audit after the reload: %d re-decisions and %d refused uses; want 1 and 4: %+v", redecided, uses, f.audit.Records()[before:])
		}
		// The session stays usable for what the new profile allows.
		rows(t, c, "SELECT id FROM items WHERE id = 901")
	})

	// Objects created where the old Go lexer saw none (after a comment
	// ended by a lone CR) or named past 63 bytes (the server truncates
	// the name) are tracked, and revoked, like any other (issue 21
	// items 1 and 3).
	t.Run("hidden and long names", func(t *testing.T) {
		f := startGate(t, sharedPG(t), nil)
		intact := seedItem(t, f, 904)
		c := connect(t, f.dsn("agent-rw", passRW, "app"))
		long := strings.Repeat("d", 70)
		rows(t, c, "SELECT 1 --x\r; PREPARE del(int) AS DELETE FROM items WHERE id = $1")
		rows(t, c, "PREPARE "+long+"(int) AS DELETE FROM items WHERE id = $1")
		narrowToReadOnly(t, f)
		wantQueryDenied(t, c, "EXECUTE del(904)", "write_denied")
		wantQueryDenied(t, c, "EXECUTE "+long[:63]+"(904)", "write_denied")
		wantQueryDenied(t, c, "EXECUTE "+long+"(904)", "write_denied")
		intact()
	})

	t.Run("cursor hidden behind a comment ending at CR", func(t *testing.T) {
		f := startGate(t, sharedPG(t), nil)
		c := connect(t, f.dsn("agent-ro", passRO, "app"))
		rows(t, c, "BEGIN; SELECT 1 --x\r; DECLARE cur CURSOR WITH HOLD FOR SELECT name FROM users ORDER BY id; COMMIT")
		f.gate.Reload(denyTable{inner: testEngine(t), table: "users"}, testIdentities(t))
		wantQueryDenied(t, c, "FETCH 1 FROM cur", "table_not_allowed")
	})

	t.Run("protocol prepare", func(t *testing.T) {
		f := startGate(t, sharedPG(t), nil)
		intact := seedItem(t, f, 902)
		c := connect(t, f.dsn("agent-rw", passRW, "app"))
		if _, err := c.Prepare(ctxT(t), "pdel", "DELETE FROM items WHERE id = $1", nil); err != nil {
			t.Fatal(err)
		}
		narrowToReadOnly(t, f)
		err := c.ExecPrepared(ctxT(t), "pdel", [][]byte{[]byte("902")}, nil, nil).Read().Err
		wantDenied(t, err, "write_denied")
		// SQL EXECUTE reaches the same statement.
		wantQueryDenied(t, c, "EXECUTE pdel(902)", "write_denied")
		intact()
		rows(t, c, "SELECT 1")
	})

	// A PREPARE run by a protocol Execute is tracked from the effects its
	// Parse's verdict read, the scan the Execute no longer repeats.
	t.Run("sql prepare executed as a portal", func(t *testing.T) {
		f := startGate(t, sharedPG(t), nil)
		intact := seedItem(t, f, 905)
		c := connect(t, f.dsn("agent-rw", passRW, "app"))
		if err := c.ExecParams(ctxT(t), "PREPARE del(int) AS DELETE FROM items WHERE id = $1", nil, nil, nil, nil).Read().Err; err != nil {
			t.Fatal(err)
		}
		narrowToReadOnly(t, f)
		wantQueryDenied(t, c, "EXECUTE del(905)", "write_denied")
		intact()
	})

	t.Run("with hold cursor", func(t *testing.T) {
		f := startGate(t, sharedPG(t), nil)
		c := connect(t, f.dsn("agent-ro", passRO, "app"))
		rows(t, c, "BEGIN; DECLARE cur CURSOR WITH HOLD FOR SELECT name FROM users ORDER BY id; COMMIT")
		if got := rows(t, c, "FETCH 1 FROM cur"); len(got) != 1 || got[0][0] != "ada" {
			t.Fatalf("FETCH before the reload = %v; want [[ada]]", got)
		}
		f.gate.Reload(denyTable{inner: testEngine(t), table: "users"}, testIdentities(t))
		for _, q := range []string{"FETCH 1 FROM cur", "FETCH NEXT IN cur", "MOVE FORWARD 1 FROM cur", "FETCH cur"} {
			wantQueryDenied(t, c, q, "table_not_allowed")
		}
		rows(t, c, "CLOSE cur")
		// Closed, the name may be used again under the new policy.
		rows(t, c, "BEGIN; DECLARE cur CURSOR WITH HOLD FOR SELECT 42; COMMIT")
		if got := rows(t, c, "FETCH 1 FROM cur"); len(got) != 1 || got[0][0] != "42" {
			t.Fatalf("FETCH of a re-declared cursor = %v; want [[42]]", got)
		}
	})

	// A cursor is a portal: a protocol Execute naming it is denied too.
	t.Run("cursor executed as a portal", func(t *testing.T) {
		f := startGate(t, sharedPG(t), nil)
		_, fe := rawClient(t, f)
		sendFlushed(t, fe, &pgproto3.Query{String: "BEGIN; DECLARE cur CURSOR WITH HOLD FOR SELECT name FROM users; COMMIT"})
		receiveUntilReady(t, fe)
		f.gate.Reload(denyTable{inner: testEngine(t), table: "users"}, testIdentities(t))
		sendFlushed(t, fe, &pgproto3.Execute{Portal: "cur", MaxRows: 1}, &pgproto3.Sync{})
		wantErrorThenReady(t, receiveUntilReady(t, fe), "table_not_allowed")
	})

	t.Run("re-prepared after deallocate", func(t *testing.T) {
		f := startGate(t, sharedPG(t), nil)
		c := connect(t, f.dsn("agent-rw", passRW, "app"))
		rows(t, c, "PREPARE del(int) AS DELETE FROM items WHERE id = $1")
		narrowToReadOnly(t, f)
		wantQueryDenied(t, c, "EXECUTE del(0)", "write_denied")
		rows(t, c, "DEALLOCATE del")
		rows(t, c, "PREPARE del(int) AS SELECT $1 + 1")
		if got := rows(t, c, "EXECUTE del(1)"); got[0][0] != "2" {
			t.Fatalf("EXECUTE of a re-prepared statement = %v; want [[2]]", got)
		}
	})

	// A Close the server skips (an earlier message of the pipeline failed)
	// leaves the statement in place.
	t.Run("close skipped after an error", func(t *testing.T) {
		f := startGate(t, sharedPG(t), nil)
		intact := seedItem(t, f, 904)
		c := connect(t, f.dsn("agent-rw", passRW, "app"))
		if _, err := c.Prepare(ctxT(t), "pdel", "DELETE FROM items WHERE id = $1", nil); err != nil {
			t.Fatal(err)
		}
		hc, err := c.Hijack()
		if err != nil {
			t.Fatal(err)
		}
		defer hc.Conn.Close()
		fe := pgproto3.NewFrontend(hc.Conn, hc.Conn)
		sendFlushed(t, fe,
			&pgproto3.Parse{Query: "SELECT * FROM no_such_table"},
			&pgproto3.Close{ObjectType: 'S', Name: "pdel"},
			&pgproto3.Sync{},
		)
		if msgs := receiveUntilReady(t, fe); len(msgs) != 2 {
			t.Fatalf("pipeline with a failing Parse = %#v; want ErrorResponse, ReadyForQuery", msgs)
		}
		narrowToReadOnly(t, f)
		sendFlushed(t, fe, &pgproto3.Query{String: "EXECUTE pdel(904)"})
		msgs := receiveUntilReady(t, fe)
		if e, ok := msgs[0].(*pgproto3.ErrorResponse); !ok || e.Message != "egressd: denied: write_denied" {
			t.Fatalf("EXECUTE of a statement whose Close was skipped = %#v; want denied write_denied", msgs)
		}
		intact()
	})

	// A DEALLOCATE the server refuses (inside a failed transaction) leaves
	// the statement in place, so the gate must keep deciding it.
	t.Run("deallocate refused by the server", func(t *testing.T) {
		f := startGate(t, sharedPG(t), nil)
		intact := seedItem(t, f, 903)
		c := connect(t, f.dsn("agent-rw", passRW, "app"))
		rows(t, c, "PREPARE del(int) AS DELETE FROM items WHERE id = $1")
		rows(t, c, "BEGIN")
		if _, err := c.Exec(ctxT(t), "SELECT 1/0").ReadAll(); err == nil {
			t.Fatal("SELECT 1/0 succeeded")
		}
		if _, err := c.Exec(ctxT(t), "DEALLOCATE del").ReadAll(); err == nil {
			t.Fatal("DEALLOCATE in a failed transaction succeeded")
		}
		rows(t, c, "ROLLBACK")
		narrowToReadOnly(t, f)
		wantQueryDenied(t, c, "EXECUTE del(903)", "write_denied")
		intact()
	})
}

// A simple Query before the Sync of an extended exchange ends the session:
// the server may answer it or skip it, and the gate's count of exchanges
// (which pairs the server's confirmations with what was sent) must not
// drift.
func TestQueryInsideExtendedExchangeRefused(t *testing.T) {
	f := startGate(t, sharedPG(t), nil)
	conn, fe := rawClient(t, f)
	sendFlushed(t, fe, &pgproto3.Parse{Name: "s1", Query: "SELECT 1"}, &pgproto3.Query{String: "SELECT 2"})
	wantClosedWithError(t, conn)
}
