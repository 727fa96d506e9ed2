package proxy

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/policy"
)

// clientConn is an accepted proxy connection. net/http answers some requests
// itself — a malformed request line, headers over MaxHeaderBytes, an
// unsupported version or transfer coding — and drops a client whose request
// stays incomplete past the read-header timeout, all without calling a
// handler. So that those are audited too, the ConnState hook marks the
// connection unhandled when a request starts arriving, the handler clears
// the mark, and a connection that closes still marked was refused by
// net/http: the status it wrote in between says why.
type clientConn struct {
	*net.TCPConn
	unhandled atomic.Bool
	status    atomic.Int32
}

// Write notes the status line net/http writes for a request no handler took.
func (c *clientConn) Write(b []byte) (int, error) {
	if c.unhandled.Load() && c.status.Load() == 0 {
		c.status.Store(int32(statusOf(b)))
	}
	return c.TCPConn.Write(b)
}

// statusOf is the status code of a response that starts with its status
// line, else -1 (something was written, but not a response we recognise).
func statusOf(b []byte) int {
	rest, ok := bytes.CutPrefix(b, []byte("HTTP/1."))
	if !ok || len(rest) < 5 || rest[1] != ' ' {
		return -1
	}
	code, err := strconv.Atoi(string(rest[2:5]))
	if err != nil {
		return -1
	}
	return code
}

type connKey struct{}

// connContext makes the clientConn reachable from the handler.
func connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// auditClientConnRefused audits a request net/http refused on the proxy
// listener (see clientConn).
func (s *Server) auditClientConnRefused(c *clientConn) {
	s.auditRefusedByHTTP(c.RemoteAddr().String(), int(c.status.Load()), nil)
}

// auditRefusedByHTTP audits a request net/http refused with status, on
// the proxy listener (t nil) or inside inspected tunnel t.
func (s *Server) auditRefusedByHTTP(remote string, status int, t *tunnel) {
	f := &flowInfo{id: s.newRequestID(), kind: policy.KindHTTP, via: audit.ViaProxy}
	f.setClient(remote)
	if t != nil {
		f.identity, f.inspected, f.via = t.identity.ID, true, t.f.via
		f.target = Target{Scheme: "https", Host: t.f.target.Host, Port: t.f.target.Port}
	} else {
		s.sources.refused(f.client)
	}
	reason := refusedReason(status)
	r := f.decisionRecord(audit.Verdict{Reason: reason})
	r.Status = max(status, 0)
	if err := s.audit.Append(r); err != nil {
		s.failLog.Failed(err, zap.String("request", f.id))
	}
	s.metrics.decided(r.Kind, r.Decision, reason)
}

func refusedReason(status int) policy.Reason {
	switch status {
	case 0:
		return policy.ReasonIncompleteRequest
	case http.StatusRequestHeaderFieldsTooLarge:
		return policy.ReasonHeadersTooLarge
	case http.StatusHTTPVersionNotSupported:
		return policy.ReasonUnsupportedHTTPVersion
	case http.StatusNotImplemented:
		return policy.ReasonUnsupportedTransferEncoding
	case http.StatusExpectationFailed:
		return policy.ReasonExpectationFailed
	}
	return policy.ReasonMalformedRequest
}
