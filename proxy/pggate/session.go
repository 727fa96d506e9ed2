package pggate

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/egressd/egressd/policy"
)

// session is one logged-in client and its upstream connection. The client
// goroutine (run) reads client messages, decides them and writes upstream;
// the relay goroutine reads upstream and writes to the client. Denials are
// never written to the client directly: the gate sends upstream a marker
// statement that fails with a syntax error in the same position, and the
// relay rewrites that error into the deny. So responses stay in order under
// pipelining, ReadyForQuery carries the server's own transaction status,
// and a deny inside an explicit transaction aborts it upstream too.
type session struct {
	g *Gate
	// cur is the identity table and engine the session's identity was
	// last resolved under; a reload replaces the gate's.
	cur *current
	// verifier is the SCRAM verifier the client logged in against: a
	// reload that rotates it ends the session.
	verifier  string
	client    net.Conn
	be        *pgproto3.Backend
	upstream  net.Conn
	fe        *pgproto3.Frontend
	identity  policy.Identity
	database  string
	remote    string
	keyPrefix string
	pid       uint32
	// catalog is the session's database's catalog holder: decisions use
	// its newest snapshot.
	catalog *dbCatalog
	// readOnly is set when the identity's profile may write nothing (the
	// connect decision's ReadOnly): the upstream session was started with
	// default_transaction_read_only on, which it must keep.
	readOnly bool

	// stmts are the prepared statements this session had vetted; Bind
	// may name only these.
	stmts map[string]struct{}
	// objs are the prepared statements and portals that may exist
	// upstream, re-decided on reload.
	objs *objects
	// discarding is set after a denied extended-protocol message: like
	// the server, the gate then drops everything until Sync.
	discarding bool
	// extendedOpen is set from an extended-protocol message to the Sync
	// that ends its exchange.
	extendedOpen bool
	// copyPending counts the CopyData bytes sent upstream since the last
	// flush.
	copyPending int
	// parsed is the text of the last allowed Parse and its verdict's
	// effects: the Execute that follows runs that text, and scanning it
	// again there cost an eighth of the gate's CPU under pgbench -M
	// extended.
	parsed parsedText

	// The idle deadlines, one per direction and connection; clientWrite
	// is used under wmu, upstreamRead by relay, the others by run.
	clientRead, clientWrite, upstreamRead, upstreamWrite deadline

	// cw buffers the relay's writes to the client; used under wmu.
	cw        *bufio.Writer
	wmu       sync.Mutex // serializes writes to the client
	closeOnce sync.Once
	closed    chan struct{}
}

func (s *session) close() {
	s.closeOnce.Do(func() {
		if s.closed != nil {
			close(s.closed)
		}
		s.g.cancels.remove(s.pid)
		if s.upstream != nil {
			s.upstream.Close()
		}
		s.client.Close()
	})
}

func (s *session) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}

// sendClientFatal ends the client with an error; used by both goroutines.
// The relay holds wmu while it writes a message, and a client that does not
// read can keep it there: so the client is closed if the lock is not free
// within a grace period, which fails that write and ends the relay.
func (s *session) sendClientFatal(f *fatal) {
	t := time.AfterFunc(2*time.Second, func() { s.client.Close() })
	defer t.Stop()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.client.SetWriteDeadline(time.Now().Add(time.Second))
	if s.cw != nil {
		// What the relay has buffered comes before the error.
		_ = s.cw.Flush() // best effort: the session ends with the FATAL below
	}
	sendFatal(s.be, f)
}

// run serves the client until it leaves or breaks the protocol.
func (s *session) run() {
	defer s.close()
	s.client.SetDeadline(time.Time{})
	s.cw = bufio.NewWriterSize(s.client, relayBufSize)
	go s.relay()
	for {
		s.clientRead.refresh(s.client.SetReadDeadline, s.g.cfg.IdleTimeout)
		msg, err := s.be.Receive()
		if err != nil {
			if !s.isClosed() && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.sendClientFatal(fatalf(codeProtocolViolation, "egressd: invalid message: %v", err))
			}
			return
		}
		if f := s.handle(msg); f != nil {
			if f != errTerminate {
				s.sendClientFatal(f)
			}
			return
		}
	}
}

// errTerminate ends the session without an error message.
var errTerminate = &fatal{}

// handle acts on one client message. A non-nil result ends the session.
func (s *session) handle(msg pgproto3.FrontendMessage) *fatal {
	if f := s.reloaded(); f != nil {
		return f
	}
	switch msg.(type) {
	case *pgproto3.Query, *pgproto3.FunctionCall:
		if s.extendedOpen {
			// The server answers such a message, or skips it after an
			// error, and the gate cannot tell which: it would lose count
			// of the exchanges its object tracking relies on.
			return fatalf(codeProtocolViolation, "egressd: %s inside an unfinished extended-protocol exchange; send Sync first", msgName(msg))
		}
	case *pgproto3.Parse, *pgproto3.Bind, *pgproto3.Describe, *pgproto3.Execute, *pgproto3.Close:
		s.extendedOpen = true
	case *pgproto3.Sync:
		s.extendedOpen = false
	}
	switch m := msg.(type) {
	case *pgproto3.Query:
		if !utf8.ValidString(m.String) {
			return fatalf(codeCharacterNotInRepr, "egressd: invalid UTF-8 in query")
		}
		// A use of a revoked object is refused before the text is
		// decided, so the query has one audit record, the deny.
		if reason := s.usesRevoked(m.String); reason != "" {
			s.auditRefusal(reason)
			s.failQuery(reason)
		} else if v := s.decide(m.String); !v.allow {
			s.failQuery(v.reason)
		} else if !s.recordEffects(v.effects) {
			s.auditRefusal(policy.ReasonSessionLimit)
			s.failQuery(policy.ReasonSessionLimit)
		} else {
			s.fe.Send(m)
		}
		s.objs.synced()
		return s.flushUpstream()
	case *pgproto3.Parse:
		if s.discarding {
			return nil
		}
		if !utf8.ValidString(m.Query) || !utf8.ValidString(m.Name) {
			return fatalf(codeCharacterNotInRepr, "egressd: invalid UTF-8 in Parse")
		}
		v := s.decide(m.Query)
		switch {
		case !v.allow:
			s.failExtended(v.reason)
		case !s.objs.record(objOp{confirm: '1', name: m.Name, create: true, texts: []string{m.Query}}):
			s.auditRefusal(policy.ReasonSessionLimit)
			s.failExtended(policy.ReasonSessionLimit)
		default:
			s.stmts[m.Name] = struct{}{}
			s.parsed = parsedText{text: m.Query, effects: v.effects, ok: true}
			s.fe.Send(m)
		}
	case *pgproto3.Bind:
		if s.discarding {
			return nil
		}
		if _, ok := s.stmts[m.PreparedStatement]; !ok {
			s.auditRefusal(policy.ReasonStatementNotVetted)
			s.failExtended(policy.ReasonStatementNotVetted)
			return nil
		}
		if reason := s.objs.revokedReason(false, m.PreparedStatement); reason != "" {
			s.auditRefusal(reason)
			s.failExtended(reason)
			return nil
		}
		if !s.objs.record(objOp{confirm: '2', portal: true, name: m.DestinationPortal, create: true, texts: s.objs.textsOf(false, m.PreparedStatement)}) {
			s.auditRefusal(policy.ReasonSessionLimit)
			s.failExtended(policy.ReasonSessionLimit)
			return nil
		}
		s.fe.Send(m)
	case *pgproto3.Close:
		if s.discarding {
			return nil
		}
		if m.ObjectType == 'S' {
			delete(s.stmts, m.Name)
		}
		if !s.objs.record(objOp{confirm: '3', portal: m.ObjectType == 'P', name: m.Name}) {
			s.auditRefusal(policy.ReasonSessionLimit)
			s.failExtended(policy.ReasonSessionLimit)
			return nil
		}
		s.fe.Send(m)
	case *pgproto3.Describe:
		if !s.discarding {
			s.fe.Send(m)
		}
	case *pgproto3.Execute:
		if s.discarding {
			return nil
		}
		if reason := s.portalAllow(m.Portal); reason != "" {
			s.auditRefusal(reason)
			s.failExtended(reason)
			return nil
		}
		s.fe.Send(m)
	case *pgproto3.Sync:
		s.discarding = false
		s.fe.Send(m)
		s.objs.synced()
		return s.flushUpstream()
	case *pgproto3.Flush:
		s.fe.Send(m)
		return s.flushUpstream()
	case *pgproto3.FunctionCall:
		// The fast-path call names a function by OID with no SQL to
		// inspect: refused in every profile.
		s.auditRefusal(policy.ReasonFunctionCallDenied)
		s.failQuery(policy.ReasonFunctionCallDenied)
		s.objs.synced()
		return s.flushUpstream()
	case *pgproto3.CopyData:
		// A client streams COPY FROM STDIN as many small messages, and
		// nothing comes back before CopyDone or CopyFail: written one
		// by one they cost a system call per row. Batch up to
		// relayBufSize; CopyDone, CopyFail, Sync and Flush push the rest.
		s.fe.Send(m)
		if s.copyPending += 5 + len(m.Data); s.copyPending < relayBufSize {
			return nil
		}
		return s.flushUpstream()
	case *pgproto3.CopyDone:
		s.fe.Send(m)
		return s.flushUpstream()
	case *pgproto3.CopyFail:
		s.fe.Send(m)
		return s.flushUpstream()
	case *pgproto3.Terminate:
		// Passed on so the server ends the session cleanly rather than
		// logging an unexpected EOF.
		s.fe.Send(m)
		_ = s.flushUpstream() // the session ends either way
		return errTerminate
	default:
		return fatalf(codeProtocolViolation, "egressd: unexpected %T message", msg)
	}
	return nil
}

// reloaded resolves the session's identity again after a reload: an
// identity that is gone, whose password was rotated, or that is no longer
// allowed this database ends the session; changed attributes (the SQL profile) apply from the next
// statement. A reload must not leave a revoked sandbox its open session.
func (s *session) reloaded() *fatal {
	cur := s.g.cur.Load()
	if cur == s.cur {
		return nil
	}
	s.cur = cur
	entry, ident, ok := cur.ids.Lookup(s.identity.ID)
	if !ok || entry.SCRAMSHA256 != s.verifier {
		s.auditRefusal(policy.ReasonIdentityRevoked)
		return sessionRefusal(policy.ReasonIdentityRevoked, "egressd: denied: %s", policy.ReasonIdentityRevoked)
	}
	s.identity, s.keyPrefix = ident, cacheKeyPrefix(ident, s.database)
	if fl := s.g.deps.Floor; fl != nil {
		if ap, ok := s.upstream.RemoteAddr().(*net.TCPAddr); ok {
			if err := fl.Check(ap.AddrPort().Addr().Unmap(), ap.AddrPort().Port()); err != nil {
				reason := policy.ReasonAddressDenied
				var de *policy.DenyError
				if errors.As(err, &de) {
					reason = de.Reason
				}
				s.auditRefusal(reason)
				return fatalf(floorSQLState, "egressd: denied: %s", reason)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.g.cfg.StartupTimeout)
	defer cancel()
	if f := s.decideConnect(ctx); f != nil {
		return f
	}
	s.redecideObjects()
	return nil
}

// failQuery makes the upstream answer the current Query with an error
// (rewritten by the relay) in place of running it.
func (s *session) failQuery(reason policy.Reason) {
	s.fe.Send(&pgproto3.Query{String: s.g.marker + string(reason)})
}

// failExtended makes the upstream answer the current extended-protocol
// message with an error (rewritten by the relay) and skip to Sync.
func (s *session) failExtended(reason policy.Reason) {
	s.fe.Send(&pgproto3.Parse{Query: s.g.marker + string(reason)})
	s.discarding = true
}

func (s *session) flushUpstream() *fatal {
	s.copyPending = 0
	s.upstreamWrite.refresh(s.upstream.SetWriteDeadline, s.g.cfg.IdleTimeout)
	if err := s.fe.Flush(); err != nil {
		if !s.isClosed() {
			s.sendClientFatal(fatalf(codeConnectionFailure, "egressd: upstream connection lost"))
		}
		return errTerminate
	}
	return nil
}

// deniedReason recognizes the syntax error the server raises for a marker
// statement and recovers the reason encoded in it.
func (g *Gate) deniedReason(e *pgproto3.ErrorResponse) (string, bool) {
	i := strings.Index(e.Message, g.marker)
	if i < 0 {
		return "", false
	}
	rest := e.Message[i+len(g.marker):]
	if j := strings.IndexByte(rest, '"'); j >= 0 {
		rest = rest[:j]
	}
	return rest, true
}

// deadline moves a connection's idle deadline forward at most every
// idle/16: each move is a runtime timer update, once per message it
// showed in gate profiles. A session therefore ends between 15/16 of the
// idle timeout and the full timeout after its last message.
type deadline struct {
	at time.Time // when the deadline was last moved
}

func (d *deadline) refresh(set func(time.Time) error, idle time.Duration) {
	now := time.Now()
	if d.at.IsZero() || now.Sub(d.at) >= idle/16 {
		// A deadline fails only on a closed connection, which the next
		// read or write reports.
		_ = set(now.Add(idle))
		d.at = now
	}
}

func msgName(msg pgproto3.FrontendMessage) string {
	if _, ok := msg.(*pgproto3.FunctionCall); ok {
		return "FunctionCall"
	}
	return "Query"
}
