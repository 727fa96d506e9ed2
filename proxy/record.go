package proxy

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
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

	// user is the name a client claimed in credentials that did not
	// authenticate it; only refusals for that carry it.
	user string
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
		Query:    f.target.Query,
		User:     f.user,
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
// a refusal (auditRefusal says which): nothing goes upstream unless its
// decision is in the log.
func (s *Server) decided(f *flowInfo, allow bool, reason, rule, pol, detail string) error {
	kind := f.kind.String()
	r := f.decisionRecord(kind, allow, reason, rule, pol)
	r.Error = detail
	if err := s.audit.Append(r); err != nil {
		if allow && errors.Is(err, audit.ErrOverBudget) {
			// The identity spent its audit budget: the allow becomes a
			// refusal, which the meter counts rather than writes.
			d := f.decisionRecord(kind, false, reasonAuditBudget, rule, pol)
			if derr := s.audit.Append(d); derr != nil {
				s.failLog.Failed(derr, zap.String("request", f.id))
			}
			s.metrics.decided(kind, "deny", reasonAuditBudget)
			return err
		}
		s.metrics.decided(kind, "deny", reasonAuditUnavailable)
		s.failLog.Failed(err, zap.String("request", f.id))
		return err
	}
	s.metrics.decided(kind, r.Decision, reason)
	return nil
}

// auditRefusal is the refusal of a request whose allow the log did not
// take: over the identity's audit budget, or the log is unavailable.
func auditRefusal(err error) refusal {
	if errors.Is(err, audit.ErrOverBudget) {
		return refusalOf(reasonAuditBudget)
	}
	return refusalOf(reasonAuditUnavailable)
}

// claimTarget is what a request names before it is parsed for a decision,
// so that refusals before authentication still say where the client meant
// to go: the authority split into host and port (userinfo dropped: it may
// be a credential), the path and the raw query. The audit writer caps it.
func claimTarget(scheme, authority, path, query string) Target {
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		authority = authority[i+1:]
	}
	t := Target{Scheme: scheme, Host: authority, Path: path, Query: query}
	if h, p, err := net.SplitHostPort(authority); err == nil {
		t.Host = h
		if n, err := strconv.ParseUint(p, 10, 16); err == nil {
			t.Port = uint16(n)
		}
	}
	return t
}
