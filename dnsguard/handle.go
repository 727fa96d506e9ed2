package dnsguard

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/hostname"
	"github.com/egressd/egressd/policy"
)

// answerable are the record types the server can answer at all (policy may
// narrow them further): the resolver fetches addresses, nothing else, so
// TXT, NULL, ANY and friends — tunnelling channels — are refused here.
func answerable(t uint16) bool {
	return t == dns.TypeA || t == dns.TypeAAAA || t == dns.TypeCNAME
}

// Decide runs the checks a question passes before any lookup, exactly as
// the server applies them: name shape and metadata names (refused before
// policy with a *policy.DenyError), then egress.dns, then the record types
// egressd can answer at all. `egressd check dns` calls it too.
func Decide(ctx context.Context, d policy.Decider, id policy.Identity, name string, qtype uint16) (*Facts, policy.Decision, error) {
	facts, err := NewFacts(name, qtype)
	if err != nil {
		return nil, policy.Decision{}, err
	}
	if IsMetadataName(facts.Name) {
		return nil, policy.Decision{}, &policy.DenyError{Reason: policy.ReasonMetadataName, Detail: facts.Name + " is a metadata service name"}
	}
	if numericTLD(facts.Name) {
		// "10.0.0.1" asked as a name: no TLD is numeric, and a rule naming
		// an IP must not turn into a DNS answer for it.
		return nil, policy.Decision{}, &policy.DenyError{Reason: policy.ReasonIPLiteralName, Detail: facts.Name + " is an address, not a name"}
	}
	dec := d.Decide(ctx, policy.Input{Identity: id, Facts: facts})
	if !dec.Allow && dec.Reason == "" {
		dec.Reason = policy.ReasonPolicyDenied
	}
	if dec.Allow && !answerable(qtype) {
		// Not a rule's decision but what the resolver can answer at all:
		// an observed allow is refused too, and would_deny goes with it.
		dec.Allow, dec.Reason, dec.WouldDeny = false, policy.ReasonQTypeNotAllowed, nil
	}
	return facts, dec, nil
}

// numericTLD reports whether the last label of name is all digits.
func numericTLD(name string) bool {
	tld := name[strings.LastIndexByte(name, '.')+1:]
	for i := 0; i < len(tld); i++ {
		if tld[i] < '0' || tld[i] > '9' {
			return false
		}
	}
	return true
}

// outcome is one query's decision as audited.
type outcome struct {
	rec   audit.Record
	rcode int
	rrs   []dns.RR
}

// handle decides one accepted query and builds the response. It never
// forwards a question: an allowed name is resolved by the Resolver, whose
// answers pass the floor before any of them reaches the sandbox.
func (s *Server) handle(ctx context.Context, client netip.Addr, req *dns.Msg) *dns.Msg {
	resp := new(dns.Msg)
	resp.SetReply(req)
	resp.RecursionAvailable = true
	resp.Authoritative = false
	if opt := req.IsEdns0(); opt != nil {
		resp.SetEdns0(ednsSize, false)
	}
	if !s.limits.allow(client) {
		// Not audited: a flood would otherwise become an audit-log flood.
		// Counted, so that the flood shows.
		s.decisions.Inc(audit.KindDNS, audit.DecisionDeny, policy.ReasonRateLimited)
		if ce := s.log.Check(zap.DebugLevel, "dns rate limited"); ce != nil {
			ce.Write(zap.Stringer("client", client))
		}
		resp.Rcode = policy.ReasonRateLimited.Codes().Rcode
		return resp
	}
	if req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 {
		// acceptQuery already refuses these; the handler must not rely on
		// its caller for safety.
		resp.Rcode = dns.RcodeFormatError
		return resp
	}
	out := s.decide(ctx, client, req.Question[0])
	if err := s.audit.Append(&out.rec); err != nil {
		if errors.Is(err, audit.ErrOverBudget) {
			// The client's identity spent its audit budget: the allow
			// becomes a refusal, which the meter counts.
			out.rec.SetVerdict(audit.Verdict{Reason: policy.ReasonAuditBudgetExceeded, Policy: out.rec.Policy})
			out.rec.IP = ""
			err = s.audit.Append(&out.rec)
		}
		if err != nil {
			s.failLog.Failed(err, zap.String("name", out.rec.Name))
		}
		// Always REFUSED, never the configured refusal: the name may well
		// exist, it could not be recorded.
		resp.Rcode = policy.ReasonAuditUnavailable.Codes().Rcode
		return resp
	}
	resp.Rcode = out.rcode
	resp.Answer = out.rrs
	if !s.steer.IsValid() {
		// Only once audited: the transparent listener takes a given
		// address as the client's destination for the name.
		s.remember(client, out.rec.Name, out.rrs)
	}
	return resp
}

// remember notes the addresses of an answer served to client for name.
func (s *Server) remember(client netip.Addr, name string, rrs []dns.RR) {
	if s.given == nil || len(rrs) == 0 {
		return
	}
	addrs := make([]netip.Addr, 0, len(rrs))
	var ttl uint32
	for _, rr := range rrs {
		var ip net.IP
		switch v := rr.(type) {
		case *dns.A:
			ip = v.A
		case *dns.AAAA:
			ip = v.AAAA
		default:
			continue
		}
		if a, ok := netip.AddrFromSlice(ip); ok {
			addrs = append(addrs, a.Unmap())
			ttl = max(ttl, rr.Header().Ttl)
		}
	}
	s.given.Remember(client, name, addrs, time.Duration(ttl)*time.Second)
}

// decide runs the checks in order: client, question shape, name, metadata
// names, policy, record type, resolution and the address floor.
func (s *Server) decide(ctx context.Context, client netip.Addr, q dns.Question) outcome {
	out := outcome{rec: audit.Record{Kind: audit.KindDNS, Client: client.String(), QType: qtypeString(q.Qtype)}}
	out.rec.Name = strings.TrimSuffix(strings.ToLower(q.Name), ".")
	if len(out.rec.Name) > hostname.MaxLen {
		out.rec.Name = out.rec.Name[:hostname.MaxLen]
	}
	st := s.state.Load()
	id, ok := st.identify(client)
	if !ok {
		return s.refused(out, policy.ReasonUnknownClient, "")
	}
	out.rec.Identity = id.ID
	if q.Qclass != dns.ClassINET {
		return s.refused(out, policy.ReasonQClassNotAllowed, "")
	}
	facts, d, err := Decide(ctx, st.decider, id, q.Name, q.Qtype)
	if err != nil {
		// Refused before Rego, but under this bundle: say which.
		out.rec.Policy = st.decider.Digest()
		return s.refusedErr(out, err)
	}
	out.rec.Name, out.rec.Policy, out.rec.Rule = facts.Name, d.Policy, d.Rule
	if !d.Allow {
		return s.refused(out, d.Reason, d.Rule)
	}
	ans := s.res.resolve(ctx, facts.Name)
	if ans.err != nil {
		return s.failed(out, ans, d)
	}
	out.rec.SetVerdict(audit.VerdictOf(d))
	out.rcode = dns.RcodeSuccess
	out.rrs = s.records(q, ans)
	out.rec.IP = joinAddrs(out.rrs)
	return out
}

// refused answers locally: REFUSED, or NXDOMAIN when so configured.
func (s *Server) refused(out outcome, reason policy.Reason, rule string) outcome {
	out.rec.SetVerdict(audit.Verdict{Reason: reason, Rule: rule, Policy: out.rec.Policy})
	out.rcode = s.rcodeFor(reason)
	return out
}

// rcodeFor is the rcode policy's reason table gives reason, with REFUSED
// answered as this server's configured refusal.
func (s *Server) rcodeFor(reason policy.Reason) int {
	rc := reason.Codes().Rcode
	if rc == dns.RcodeRefused {
		return s.refuse
	}
	return rc
}

func (s *Server) refusedErr(out outcome, err error) outcome {
	var de *policy.DenyError
	if errors.As(err, &de) {
		return s.refused(out, de.Reason, "")
	}
	return s.refused(out, policy.ReasonMalformedName, "")
}

// failed maps a resolution of the name d allowed that gave no vetted
// address: a name that does not exist is NXDOMAIN, one without addresses
// is an empty answer (an allow, observed if d was), a forbidden address
// refuses the whole answer, and an upstream failure is SERVFAIL.
func (s *Server) failed(out outcome, ans *answer, d policy.Decision) outcome {
	var de *policy.DenyError
	reason := policy.ReasonDNSFailure
	if errors.As(ans.err, &de) {
		reason = de.Reason
	}
	v := audit.VerdictOf(d)
	v.Allow, v.Reason = reason == policy.ReasonDNSNoAddress, reason
	out.rec.SetVerdict(v)
	out.rcode = s.rcodeFor(reason)
	if reason.Codes().Rcode == dns.RcodeRefused && de != nil {
		out.rec.Detail = map[string]string{"detail": de.Detail}
	}
	return out
}

// records builds the answer for q from a vetted resolution. The CNAME chain
// is flattened: the addresses are given for the asked name itself, so the
// sandbox learns no alias it did not ask about.
func (s *Server) records(q dns.Question, ans *answer) []dns.RR {
	ttl := s.answerTTL(ans)
	hdr := func(t uint16) dns.RR_Header {
		return dns.RR_Header{Name: q.Name, Rrtype: t, Class: dns.ClassINET, Ttl: ttl}
	}
	var rrs []dns.RR
	if s.steer.IsValid() {
		// Steered: the client connects to the transparent listener,
		// which decides by the name the connection carries.
		switch {
		case q.Qtype == dns.TypeA && s.steer.Is4():
			rrs = append(rrs, &dns.A{Hdr: hdr(dns.TypeA), A: s.steer.AsSlice()})
		case q.Qtype == dns.TypeAAAA && s.steer.Is6():
			rrs = append(rrs, &dns.AAAA{Hdr: hdr(dns.TypeAAAA), AAAA: s.steer.AsSlice()})
		}
		return rrs
	}
	switch q.Qtype {
	case dns.TypeCNAME:
		if len(ans.chain) > 0 {
			rrs = append(rrs, &dns.CNAME{Hdr: hdr(dns.TypeCNAME), Target: dns.Fqdn(ans.chain[0])})
		}
	case dns.TypeA:
		for _, a := range ans.addrs {
			if a.Is4() {
				rrs = append(rrs, &dns.A{Hdr: hdr(dns.TypeA), A: a.AsSlice()})
			}
		}
	case dns.TypeAAAA:
		for _, a := range ans.addrs {
			if a.Is6() {
				rrs = append(rrs, &dns.AAAA{Hdr: hdr(dns.TypeAAAA), AAAA: a.AsSlice()})
			}
		}
	}
	return rrs
}

// answerTTL is what is left of the cached TTL, capped by answer_ttl.
func (s *Server) answerTTL(ans *answer) uint32 {
	left := time.Until(ans.expires)
	if ans.ttl <= 0 || left <= 0 {
		return 0
	}
	return uint32(min(left, s.cfg.AnswerTTL) / time.Second)
}

func joinAddrs(rrs []dns.RR) string {
	var b strings.Builder
	for _, rr := range rrs {
		var s string
		switch v := rr.(type) {
		case *dns.A:
			s = v.A.String()
		case *dns.AAAA:
			s = v.AAAA.String()
		default:
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s)
	}
	return b.String()
}
