package pggate

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/zap"

	"github.com/egressd/egressd/policy"
)

// fatal is an error that ends a client with an ErrorResponse.
type fatal struct {
	code, msg string
	// reason, if set, marks a login refusal not yet audited: serveConn
	// records it (auditLogin) with the claimed user and database.
	reason policy.Reason
	// ended is the reason of a refusal already audited (sessionRefusal),
	// kept so that a refused login is counted by its reason too.
	ended policy.Reason
}

func (f *fatal) Error() string { return f.code + ": " + f.msg }

func fatalf(code, format string, a ...any) *fatal {
	return &fatal{code: code, msg: fmt.Sprintf(format, a...)}
}

// loginFatalf is a login refusal that serveConn audits with reason.
func loginFatalf(reason policy.Reason, code, format string, a ...any) *fatal {
	return &fatal{code: code, msg: fmt.Sprintf(format, a...), reason: reason}
}

// loginRefusal is a login refusal with the SQLSTATE policy's reason table
// gives reason; serveConn audits it.
func loginRefusal(reason policy.Reason, format string, a ...any) *fatal {
	return loginFatalf(reason, reason.Codes().SQLState, format, a...)
}

// sessionRefusal ends a session, already audited, with the SQLSTATE
// policy's reason table gives reason.
func sessionRefusal(reason policy.Reason, format string, a ...any) *fatal {
	f := fatalf(reason.Codes().SQLState, format, a...)
	f.ended = reason
	return f
}

// floorSQLState is the code of a refusal by the address floor whatever its
// reason (a name that did not resolve included): the gate refused the
// destination, as a policy deny does.
var floorSQLState = policy.ClassPolicy.Codes().SQLState

// SQLSTATEs the gate sends.
const (
	codeProtocolViolation    = "08P01"
	codeConnectionFailure    = "08006"
	codeFeatureUnsupported   = "0A000"
	codeInsufficientPrivs    = "42501"
	codeCharacterNotInRepr   = "22021"
	codeProgramLimitExceeded = "54000"
)

// sendFatal writes a FATAL ErrorResponse; errors are ignored because the
// connection is closed next anyway.
func sendFatal(be *pgproto3.Backend, f *fatal) {
	be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: f.code, Message: f.msg})
	_ = be.Flush()
}

// passedParams are the startup parameters a client may set; they go
// upstream unchanged. Everything else — options (which could carry -c
// settings), replication, arbitrary GUCs such as role — is refused.
var passedParams = map[string]bool{
	"application_name": true, "datestyle": true, "timezone": true,
	"intervalstyle": true, "extra_float_digits": true,
}

// serveConn runs one client from its first byte to its close.
func (g *Gate) serveConn(conn net.Conn) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(g.cfg.StartupTimeout))
	be := g.newBackend(conn)
	var startup *pgproto3.StartupMessage
	for startup == nil {
		msg, err := be.ReceiveStartupMessage()
		if err != nil {
			sendFatal(be, fatalf(codeProtocolViolation, "egressd: invalid startup packet: %v", err))
			return
		}
		switch m := msg.(type) {
		case *pgproto3.SSLRequest:
			if g.tls == nil {
				if _, err := conn.Write([]byte{'N'}); err != nil {
					return
				}
				continue
			}
			if _, err := conn.Write([]byte{'S'}); err != nil {
				return
			}
			tc := tls.Server(conn, g.tls)
			if err := tc.Handshake(); err != nil {
				return
			}
			conn = tc
			be = g.newBackend(conn)
		case *pgproto3.GSSEncRequest:
			if _, err := conn.Write([]byte{'N'}); err != nil {
				return
			}
		case *pgproto3.CancelRequest:
			g.forwardCancel(m)
			return
		case *pgproto3.StartupMessage:
			startup = m
		}
	}
	start := time.Now()
	s, f := g.login(conn, be, startup)
	if f != nil {
		// Every refusal login returns names a reason; no_decision only
		// if a new one forgot to, rather than counting it as allowed.
		g.deps.Logins.Inc(cmp.Or(f.reason, f.ended, policy.ReasonNoDecision))
		g.log.Info("login refused", zap.String("client", conn.RemoteAddr().String()),
			zap.String("user", startup.Parameters["user"]), zap.String("code", f.code), zap.String("error", f.msg))
		g.auditLogin(conn.RemoteAddr().String(), startup.Parameters, f.reason)
		sendFatal(be, f)
		return
	}
	g.deps.Logins.Inc("")
	defer g.slots.release(s.identity.ID)
	if !g.addSession(s) {
		// The drain began during this login: the session ends as those
		// it cuts at its deadline do.
		g.cutSession(s, sessionRef{id: s.identity.ID, remote: s.remote, database: s.database})
		return
	}
	defer g.removeSession(s)
	s.run()
	g.log.Info("session closed", zap.String("identity", s.identity.ID), zap.String("database", s.database),
		zap.String("client", s.remote), zap.Duration("duration", time.Since(start)))
}

func (g *Gate) newBackend(conn net.Conn) *pgproto3.Backend {
	be := pgproto3.NewBackend(conn, conn)
	be.SetMaxBodyLen(g.cfg.MaxMessageBytes)
	return be
}

// login checks the startup parameters, authenticates the client, decides
// the database, and opens the upstream session.
func (g *Gate) login(conn net.Conn, be *pgproto3.Backend, m *pgproto3.StartupMessage) (*session, *fatal) {
	if m.ProtocolVersion != pgproto3.ProtocolVersion30 {
		// A 3.2 client is told the gate speaks 3.0 (it then uses 3.0
		// cancel keys), as PostgreSQL itself does.
		be.Send(&pgproto3.NegotiateProtocolVersion{NewestMinorProtocol: 0})
	}
	user, db := m.Parameters["user"], m.Parameters["database"]
	if user == "" {
		return nil, loginRefusal(policy.ReasonStartupInvalid, "egressd: no user name in startup packet")
	}
	if db == "" {
		db = user
	}
	params := map[string]string{}
	for k, v := range m.Parameters {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			// 22021 names the fault more exactly than the reason's 08004.
			return nil, loginFatalf(policy.ReasonStartupInvalid, codeCharacterNotInRepr, "egressd: invalid UTF-8 in startup packet")
		}
		lk := strings.ToLower(k)
		switch {
		case lk == "user" || lk == "database" || strings.HasPrefix(lk, "_pq_."):
		case lk == "client_encoding":
			// Ignored: the session is UTF8 whatever the client asks
			// (psql sends its locale's encoding); the client learns
			// the real one from ParameterStatus.
		case lk == "standard_conforming_strings" && strings.EqualFold(v, "on"):
		case passedParams[lk]:
			params[lk] = v
		default:
			return nil, loginRefusal(policy.ReasonStartupParameterDenied, "egressd: denied: %s (%s)", policy.ReasonStartupParameterDenied, lk)
		}
	}
	cur := g.cur.Load()
	entry, ident, known := cur.ids.Lookup(user)
	var v *verifier
	if known && entry.SCRAMSHA256 != "" {
		var err error
		if v, err = parseVerifier(entry.SCRAMSHA256); err != nil {
			g.log.Warn("unusable SCRAM verifier", zap.String("identity", user), zap.Error(err))
		}
	}
	if err := scramServer(be, v, g.saltFor(user)); err != nil {
		if !errors.Is(err, errAuthFailed) {
			g.log.Debug("authentication exchange failed", zap.String("identity", user), zap.Error(err))
		}
		reason := policy.ReasonAuthenticationFailed
		if !known {
			reason = policy.ReasonUnknownIdentity
		}
		return nil, loginRefusal(reason, "password authentication failed for user %q", user)
	}
	s := &session{g: g, cur: cur, verifier: entry.SCRAMSHA256, client: conn, be: be, identity: ident, database: db, remote: conn.RemoteAddr().String(), stmts: map[string]struct{}{}, objs: newObjects(),
		closed: make(chan struct{})}
	s.keyPrefix = cacheKeyPrefix(ident, db)
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.StartupTimeout)
	defer cancel()
	if f := s.decideConnect(ctx); f != nil {
		return nil, f
	}
	g.learnMaxConns(ctx, db)
	maxTotal, maxPer := g.sessionCaps()
	if f := g.slots.acquire(ident.ID, maxTotal, maxPer); f != nil {
		return nil, f
	}
	if err := s.connectUpstream(ctx, params); err != nil {
		g.slots.release(ident.ID)
		var f *fatal
		if errors.As(err, &f) {
			if f.reason == "" {
				f.reason = policy.ReasonUpstreamUnavailable
			}
			return nil, f
		}
		var de *policy.DenyError
		if errors.As(err, &de) {
			g.log.Warn("upstream refused by address floor", zap.Error(err))
			return nil, loginFatalf(de.Reason, floorSQLState, "egressd: denied: %s", de.Reason)
		}
		g.log.Warn("upstream login failed", zap.String("identity", ident.ID), zap.Error(err))
		return nil, loginRefusal(policy.ReasonUpstreamUnavailable, "egressd: upstream unavailable")
	}
	return s, nil
}

// saltFor is the salt shown to an unknown user: stable per user, so a
// repeated probe cannot tell it from a real one.
func (g *Gate) saltFor(user string) []byte {
	h := hmac.New(sha256.New, g.fakeSalt)
	h.Write([]byte(user))
	return h.Sum(nil)[:16]
}

// decideConnect asks egress.sql whether the identity may use the database:
// a "connect" statement with no relations.
func (s *session) decideConnect(ctx context.Context) *fatal {
	st := connectStatement(s.database)
	d := s.g.engine().Decide(ctx, policy.Input{Identity: s.identity, Facts: st})
	if err := s.audit(d, "", ""); err != nil {
		d = policy.Deny(policy.ReasonAuditUnavailable, "")
	}
	if !d.Allow {
		return sessionRefusal(d.Reason, "egressd: denied: %s", d.Reason)
	}
	if s.upstream == nil {
		// At login only: a session whose profile a reload narrowed is
		// held to the new profile by its decisions (its prepared
		// statements and cursors are decided again), and keeps the
		// upstream session it started with.
		s.readOnly = d.ReadOnly
	}
	return nil
}
