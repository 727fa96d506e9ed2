package proxy

import (
	"net/netip"
	"time"

	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/policy"
)

// flowInfo is what every audit record of one request or tunnel shares.
type flowInfo struct {
	id       string
	kind     policy.Kind
	identity string
	client   netip.Addr
	clientS  string // client.String(), formatted once for every record
	method   string
	target   Target
	start    time.Time
}

func (f *flowInfo) record(kind string) *audit.Record {
	r := &audit.Record{
		Kind:     kind,
		Request:  f.id,
		Identity: f.identity,
		Method:   f.method,
		Scheme:   f.target.Scheme,
		Host:     f.target.Host,
		Port:     f.target.Port,
		Path:     f.target.Path,
	}
	r.Client = f.clientS
	return r
}

// setClient records the client address from a RemoteAddr.
func (f *flowInfo) setClient(remote string) {
	f.client = clientAddr(remote)
	if f.client.IsValid() {
		f.clientS = f.client.String()
	}
}

// decisionRecord is the record appended before anything goes upstream.
func (f *flowInfo) decisionRecord(kind string, allow bool, reason, rule, pol string) *audit.Record {
	r := f.record(kind)
	r.Decision = decisionWord(allow)
	r.Reason = reason
	r.Rule = rule
	r.Policy = pol
	return r
}

func decisionWord(allow bool) string {
	if allow {
		return "allow"
	}
	return "deny"
}

// decided audits and counts a decision. A failed append turns an allow into
// a refusal: nothing goes upstream unless its decision is in the log.
func (s *Server) decided(f *flowInfo, allow bool, reason, rule, pol, detail string) error {
	kind := f.kind.String()
	r := f.decisionRecord(kind, allow, reason, rule, pol)
	r.Error = detail
	if err := s.audit.Append(r); err != nil {
		s.metrics.decided(kind, "deny", reasonAuditUnavailable)
		s.log.Error("audit append failed", zap.String("request", f.id), zap.Error(err))
		return err
	}
	s.metrics.decided(kind, r.Decision, reason)
	return nil
}
