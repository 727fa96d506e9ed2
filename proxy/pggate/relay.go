package pggate

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
	"go.uber.org/zap"
)

const (
	// relayBufSize is each direction's buffer in the relay: all the gate
	// holds of a server message, however large, is this much.
	relayBufSize = 32 << 10
	// inspectMax bounds the server messages the relay decodes (errors,
	// parameter reports, command tags). A larger error cannot be a denial
	// marker's (those are a few dozen bytes) and passes unread.
	inspectMax = 64 << 10
)

// Backend message types the relay looks into; everything else is copied
// through as bytes.
const (
	msgErrorResponse   = 'E'
	msgParameterStatus = 'S'
	msgReadyForQuery   = 'Z'
	msgCommandComplete = 'C'
	msgParseComplete   = '1'
	msgBindComplete    = '2'
	msgCloseComplete   = '3'
)

// relay copies server messages to the client as they arrive, framed but
// not decoded: a message is its 5-byte header and a body streamed through
// fixed buffers, so a client that does not read stalls the server (TCP
// backpressure) instead of growing the gate. Only small control messages
// are decoded: ErrorResponse (to rewrite the gate's denial markers) and
// ParameterStatus (to watch the pinned parameters). Messages are written
// whole under wmu, and the client is flushed whenever no more server bytes
// are waiting, so a pipelined burst costs one write, not one per message.
func (s *session) relay() {
	defer s.close()
	r := bufio.NewReaderSize(s.upstream, relayBufSize)
	var hdr [5]byte
	// msg holds a decoded message, header and body, at most
	// 5+inspectMax bytes, reused.
	var msg []byte
	for {
		s.upstreamRead.refresh(s.upstream.SetReadDeadline, s.g.cfg.IdleTimeout)
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			s.upstreamLost(err)
			return
		}
		n := int64(binary.BigEndian.Uint32(hdr[1:])) - 4
		if n < 0 || n > int64(s.g.cfg.MaxUpstreamMessageBytes) {
			s.g.log.Warn("server message over max_upstream_message_bytes; ending session",
				zap.String("identity", s.identity.ID), zap.Int64("bytes", n))
			s.sendClientFatal(fatalf(codeProgramLimitExceeded,
				"egressd: a server message of %d bytes exceeds postgres.max_upstream_message_bytes (%d); select less per row or raise the limit",
				n, s.g.cfg.MaxUpstreamMessageBytes))
			return
		}
		typ := hdr[0]
		decode := (typ == msgErrorResponse || typ == msgParameterStatus) && n <= inspectMax ||
			typ == msgReadyForQuery && n == 1 ||
			typ == msgCommandComplete && n <= inspectMax && s.objs.wantsTag()
		if decode {
			if int64(cap(msg)) < 5+n {
				msg = make([]byte, 5+n)
			}
			msg = msg[:5+n]
			copy(msg, hdr[:])
			body := msg[5:]
			if _, err := io.ReadFull(r, body); err != nil {
				s.upstreamLost(err)
				return
			}
			out, f := s.inspect(typ, msg)
			if f != nil {
				s.sendClientFatal(f)
				return
			}
			if err := s.writeClient(out, nil, 0, r); err != nil {
				s.writeFailed(err)
				return
			}
			s.track(typ, body)
			continue
		}
		if typ == msgParameterStatus {
			// A parameter report too large to check cannot be let by.
			s.sendClientFatal(fatalf(codeFeatureUnsupported, "egressd: upstream sent an oversized parameter report; session ended"))
			return
		}
		if err := s.writeClient(hdr[:], r, n, r); err != nil {
			s.writeFailed(err)
			return
		}
		s.track(typ, nil)
	}
}

// track tells the session's object tracking what the server confirmed
// (body is the decoded message, nil when it was streamed).
func (s *session) track(typ byte, body []byte) {
	switch typ {
	case msgParseComplete, msgBindComplete, msgCloseComplete:
		s.objs.confirm(typ, "")
	case msgCommandComplete:
		if n := len(body); n > 0 && body[n-1] == 0 {
			s.objs.confirm(typ, string(body[:n-1]))
		}
	case msgReadyForQuery:
		if len(body) == 1 {
			s.objs.readyForQuery(body[0])
		}
	}
}

// inspect decodes one small message (header and body) and returns the
// bytes to send for it (msg, or the rewritten denial); a non-nil fatal
// ends the session.
func (s *session) inspect(typ byte, msg []byte) ([]byte, *fatal) {
	body := msg[5:]
	switch typ {
	case msgErrorResponse:
		var e pgproto3.ErrorResponse
		if err := e.Decode(body); err != nil {
			return msg, nil
		}
		if reason, ok := s.g.deniedReason(&e); ok {
			out, _ := (&pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: codeInsufficientPrivs, Message: "egressd: denied: " + reason}).Encode(nil)
			return out, nil
		}
	case msgParameterStatus:
		var m pgproto3.ParameterStatus
		if err := m.Decode(body); err != nil {
			return nil, fatalf(codeProtocolViolation, "egressd: malformed parameter report from upstream; session ended")
		}
		if want, pinned := s.pinnedValue(m.Name); pinned && !strings.EqualFold(m.Value, want) {
			s.g.log.Warn("upstream changed a pinned parameter; ending session",
				zap.String("identity", s.identity.ID), zap.String("parameter", m.Name), zap.String("value", m.Value))
			return nil, fatalf(codeFeatureUnsupported, "egressd: upstream changed %s; session ended", m.Name)
		}
	}
	return msg, nil
}

// upstreamReadError is a failed read of the server inside writeClient.
type upstreamReadError struct{ err error }

func (e *upstreamReadError) Error() string { return "read upstream: " + e.err.Error() }

// writeClient writes head and then n bytes streamed from body to the
// client as one message under wmu, and flushes when up has nothing more
// buffered. An error ends the session.
func (s *session) writeClient(head []byte, body *bufio.Reader, n int64, up *bufio.Reader) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.clientWrite.refresh(s.client.SetWriteDeadline, s.g.cfg.IdleTimeout)
	if _, err := s.cw.Write(head); err != nil {
		return err
	}
	for n > 0 {
		if body.Buffered() == 0 {
			// Push what is pending before waiting on the server, so a
			// slow row never holds back the ones before it.
			if err := s.cw.Flush(); err != nil {
				return err
			}
			s.upstreamRead.refresh(s.upstream.SetReadDeadline, s.g.cfg.IdleTimeout)
			if _, err := body.Peek(1); err != nil {
				return &upstreamReadError{err}
			}
		}
		chunk, _ := body.Peek(int(min(n, int64(body.Buffered()))))
		if _, err := s.cw.Write(chunk); err != nil {
			return err
		}
		_, _ = body.Discard(len(chunk)) // bytes just peeked: Discard cannot fall short
		n -= int64(len(chunk))
		s.clientWrite.refresh(s.client.SetWriteDeadline, s.g.cfg.IdleTimeout)
	}
	if up.Buffered() == 0 {
		return s.cw.Flush()
	}
	return nil
}

// writeFailed ends the session after writeClient failed. Either the client
// is gone, or the server went away inside a message part of which the
// client already has: an error message now would be read as the rest of
// it, so the client only sees the connection end.
func (s *session) writeFailed(err error) {
	var ue *upstreamReadError
	if errors.As(err, &ue) && !s.isClosed() {
		s.g.log.Info("upstream connection ended inside a message", zap.String("identity", s.identity.ID), zap.Error(ue.err))
	}
}

// upstreamLost tells the client its server went away, unless the session
// is already closing.
func (s *session) upstreamLost(err error) {
	if !s.isClosed() {
		s.g.log.Info("upstream connection ended", zap.String("identity", s.identity.ID), zap.Error(err))
		s.sendClientFatal(fatalf(codeConnectionFailure, "egressd: upstream connection lost"))
	}
}
