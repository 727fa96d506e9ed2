package dnsguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"

	"github.com/egressd/egressd/policy"
)

// Resolver looks names up over the configured upstreams and vets every
// answer against the floor: if any address of a name is forbidden, the name
// is denied. It caches answers (TTL-clamped, negative answers too) and
// merges concurrent lookups of one name.
type Resolver struct {
	cfg       Config
	floor     *Floor
	log       *zap.Logger
	upstreams []string
	next      atomic.Uint32
	udp, tcp  *dns.Client
	cache     *cache
	group     singleflight.Group
	// budget bounds one whole resolution (both types, every CNAME hop).
	budget time.Duration
}

// NewResolver builds a resolver. With no upstreams configured it reads the
// nameservers of /etc/resolv.conf.
func NewResolver(cfg Config, floor *Floor, log *zap.Logger) (*Resolver, error) {
	if floor == nil {
		return nil, errors.New("new resolver: nil floor")
	}
	cfg.Provision()
	ups := cfg.Upstreams
	if len(ups) == 0 {
		cc, err := dns.ClientConfigFromFile("/etc/resolv.conf")
		if err != nil {
			return nil, fmt.Errorf("new resolver: no dns.upstreams and %w", err)
		}
		for _, s := range cc.Servers {
			ups = append(ups, net.JoinHostPort(s, cc.Port))
		}
		if len(ups) == 0 {
			return nil, errors.New("new resolver: no dns.upstreams and no nameserver in /etc/resolv.conf")
		}
	}
	return &Resolver{
		cfg:       cfg,
		floor:     floor,
		log:       log.Named("dnsguard"),
		upstreams: ups,
		udp:       &dns.Client{Net: "udp", UDPSize: ednsSize, Timeout: cfg.Timeout},
		tcp:       &dns.Client{Net: "tcp", Timeout: cfg.Timeout},
		cache:     newCache(cfg.CacheSize),
		budget:    cfg.Timeout * time.Duration(cfg.Attempts*len(ups)+cfg.MaxCNAME),
	}, nil
}

// ednsSize is the UDP payload size we advertise (the DNS flag day value:
// no fragmentation).
const ednsSize = 1232

// Resolve returns the addresses of host, every one vetted by the floor
// (without a port: Dialer checks the port). An IP literal is checked and
// returned as is. Denials, NXDOMAIN and failures are *policy.DenyError. The
// returned slice is shared with the cache and must not be modified.
func (r *Resolver) Resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, ok := parseLiteral(host); ok {
		if err := r.floor.checkAddr(a); err != nil {
			return nil, err
		}
		return []netip.Addr{a.Unmap()}, nil
	}
	name, err := normalizeName(host)
	if err != nil {
		return nil, err
	}
	ans := r.resolve(ctx, name)
	return ans.addrs, ans.err
}

// Flush forgets every cached answer. Answers were vetted against the floor
// of their time, so a floor Update is followed by a Flush: a name the new
// rules allow is not kept denied by a cached refusal, and the sandbox DNS
// server stops handing out addresses the new rules deny.
func (r *Resolver) Flush() {
	r.cache.clear()
}

// parseLiteral accepts "1.2.3.4", "::1" and "[::1]". A host name that
// cannot be an address is not parsed: a failed parse allocates its error.
func parseLiteral(host string) (netip.Addr, bool) {
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if host == "" || !(strings.IndexByte(host, ':') >= 0 || '0' <= host[len(host)-1] && host[len(host)-1] <= '9') {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	return a, err == nil
}

// resolve returns the cached answer or fetches one; the fetch runs once per
// name however many callers wait, and outlives a caller that gives up.
func (r *Resolver) resolve(ctx context.Context, name string) *answer {
	if IsMetadataName(name) {
		return &answer{err: &policy.DenyError{Reason: policy.ReasonMetadataName, Detail: name + " is a metadata service name"}}
	}
	if a := r.cache.get(name, time.Now()); a != nil {
		return a
	}
	ch := r.group.DoChan(name, func() (any, error) {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.budget)
		defer cancel()
		a := r.fetch(fctx, name)
		now := time.Now()
		a.expires = now.Add(a.ttl)
		r.cache.put(name, a, now)
		return a, nil
	})
	select {
	case res := <-ch:
		return res.Val.(*answer)
	case <-ctx.Done():
		return &answer{err: &policy.DenyError{Reason: policy.ReasonDNSFailure, Detail: "resolve " + name, Err: ctx.Err()}}
	}
}

// typeResult is one record type's part of an answer.
type typeResult struct {
	addrs []netip.Addr
	chain []string
	rcode int
	ttl   uint32
	err   error
}

// fetch asks the upstreams for A and AAAA in parallel and vets the union.
func (r *Resolver) fetch(ctx context.Context, name string) *answer {
	var a, aaaa typeResult
	done := make(chan struct{})
	go func() {
		defer close(done)
		aaaa = r.lookupType(ctx, name, dns.TypeAAAA)
	}()
	a = r.lookupType(ctx, name, dns.TypeA)
	<-done
	for _, t := range []*typeResult{&a, &aaaa} {
		if t.err != nil {
			return r.denied(t.err)
		}
	}
	chain := a.chain
	if len(chain) == 0 {
		chain = aaaa.chain
	}
	ttl := min(a.ttl, aaaa.ttl)
	addrs := append(append(make([]netip.Addr, 0, len(a.addrs)+len(aaaa.addrs)), a.addrs...), aaaa.addrs...)
	if len(addrs) == 0 {
		reason, rcode := policy.ReasonDNSNoAddress, dns.RcodeSuccess
		if a.rcode == dns.RcodeNameError && aaaa.rcode == dns.RcodeNameError {
			reason, rcode = policy.ReasonDNSNXDomain, dns.RcodeNameError
		}
		return &answer{
			chain: chain,
			rcode: rcode,
			err:   &policy.DenyError{Reason: reason, Detail: name + " has no address"},
			ttl:   min(r.clampTTL(ttl), r.cfg.NegativeTTL),
		}
	}
	for _, ad := range addrs {
		if err := r.floor.checkAddr(ad); err != nil {
			var de *policy.DenyError
			if errors.As(err, &de) {
				err = &policy.DenyError{Reason: de.Reason, Detail: name + " resolves to " + de.Detail}
			}
			r.log.Warn("forbidden address in answer", zap.String("name", name), zap.Error(err))
			return &answer{chain: chain, err: err, ttl: min(r.clampTTL(ttl), r.cfg.NegativeTTL)}
		}
	}
	return &answer{addrs: addrs, chain: chain, ttl: r.clampTTL(ttl)}
}

// denied turns a lookup error into an uncached answer (a failure is not an
// answer worth remembering) unless it is a deny, which is cached briefly.
func (r *Resolver) denied(err error) *answer {
	var de *policy.DenyError
	if errors.As(err, &de) && de.Reason != policy.ReasonDNSFailure {
		return &answer{err: err, ttl: r.cfg.NegativeTTL}
	}
	return &answer{err: err}
}

func (r *Resolver) clampTTL(sec uint32) time.Duration {
	d := time.Duration(sec) * time.Second
	return min(max(d, r.cfg.MinTTL), r.cfg.MaxTTL)
}

// lookupType resolves one record type, following the CNAME chain through
// the answer section and, where an upstream stops at a CNAME, with new
// queries; every name on the chain is checked.
func (r *Resolver) lookupType(ctx context.Context, name string, qtype uint16) typeResult {
	// ttl starts unbounded: a type with no records and no SOA does not
	// shorten the other type's TTL.
	res := typeResult{ttl: ^uint32(0)}
	cur := name
	for hop := 0; ; hop++ {
		msg, err := r.query(ctx, cur, qtype)
		if err != nil {
			res.err = &policy.DenyError{Reason: policy.ReasonDNSFailure, Detail: fmt.Sprintf("%s %s", cur, dns.TypeToString[qtype]), Err: err}
			return res
		}
		res.rcode = msg.Rcode
		before := len(res.chain)
		// Walk the chain within this message.
		for {
			target, ttl, ok := findCNAME(msg.Answer, cur)
			if !ok {
				break
			}
			if len(res.chain) >= r.cfg.MaxCNAME {
				res.err = &policy.DenyError{Reason: policy.ReasonCNAMEChainTooLong, Detail: fmt.Sprintf("%s: more than %d CNAMEs", name, r.cfg.MaxCNAME)}
				return res
			}
			if IsMetadataName(target) {
				res.err = &policy.DenyError{Reason: policy.ReasonMetadataName, Detail: fmt.Sprintf("%s is an alias of metadata name %s", name, target)}
				return res
			}
			res.chain = append(res.chain, target)
			res.ttl = min(res.ttl, ttl)
			cur = target
		}
		found := false
		for _, rr := range msg.Answer {
			if !strings.EqualFold(strings.TrimSuffix(rr.Header().Name, "."), cur) {
				continue
			}
			var a netip.Addr
			switch v := rr.(type) {
			case *dns.A:
				a, _ = netip.AddrFromSlice(v.A.To4())
			case *dns.AAAA:
				a, _ = netip.AddrFromSlice(v.AAAA.To16())
			default:
				continue
			}
			if rr.Header().Rrtype != qtype {
				continue
			}
			// A mapped AAAA is the IPv4 address: dial and report it as one.
			a = a.Unmap()
			found = true
			res.ttl = min(res.ttl, rr.Header().Ttl)
			if !slices.Contains(res.addrs, a) {
				res.addrs = append(res.addrs, a)
			}
		}
		if found || msg.Rcode != dns.RcodeSuccess || len(res.chain) == before || hop >= r.cfg.MaxCNAME {
			if ttl, ok := negativeTTL(msg); !found && ok {
				res.ttl = min(res.ttl, ttl)
			}
			return res
		}
		// The upstream stopped at a CNAME: ask for the target.
	}
}

func findCNAME(rrs []dns.RR, owner string) (target string, ttl uint32, ok bool) {
	for _, rr := range rrs {
		c, isC := rr.(*dns.CNAME)
		if isC && strings.EqualFold(strings.TrimSuffix(c.Hdr.Name, "."), owner) {
			return strings.ToLower(strings.TrimSuffix(c.Target, ".")), c.Hdr.Ttl, true
		}
	}
	return "", 0, false
}

// negativeTTL is the SOA minimum of a negative answer (RFC 2308); without
// an SOA the answer sets no bound and the configured negative_ttl applies.
func negativeTTL(m *dns.Msg) (uint32, bool) {
	for _, rr := range m.Ns {
		if soa, ok := rr.(*dns.SOA); ok {
			return min(soa.Hdr.Ttl, soa.Minttl), true
		}
	}
	return 0, false
}

// query asks the upstreams in rotation, each Attempts times, for one
// question; a truncated UDP answer is retried over TCP on the same upstream.
func (r *Resolver) query(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.SetEdns0(ednsSize, false)
	start := int(r.next.Add(1))
	var lastErr error
	for i := 0; i < r.cfg.Attempts*len(r.upstreams); i++ {
		if ctx.Err() != nil {
			break
		}
		up := r.upstreams[(start+i)%len(r.upstreams)]
		resp, err := r.exchange(ctx, m, up)
		if err != nil {
			lastErr = fmt.Errorf("%s: %w", up, err)
			continue
		}
		if resp.Rcode != dns.RcodeSuccess && resp.Rcode != dns.RcodeNameError {
			lastErr = fmt.Errorf("%s: rcode %s", up, dns.RcodeToString[resp.Rcode])
			continue
		}
		if len(resp.Question) != 1 || !strings.EqualFold(resp.Question[0].Name, m.Question[0].Name) || resp.Question[0].Qtype != qtype {
			lastErr = fmt.Errorf("%s: answer for another question", up)
			continue
		}
		return resp, nil
	}
	if lastErr == nil {
		lastErr = ctx.Err()
	}
	return nil, lastErr
}

func (r *Resolver) exchange(ctx context.Context, m *dns.Msg, up string) (*dns.Msg, error) {
	tctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	resp, _, err := r.udp.ExchangeContext(tctx, m, up)
	if err != nil {
		return nil, fmt.Errorf("udp: %w", err)
	}
	if !resp.Truncated {
		return resp, nil
	}
	tctx2, cancel2 := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel2()
	resp, _, err = r.tcp.ExchangeContext(tctx2, m, up)
	if err != nil {
		return nil, fmt.Errorf("tcp after truncation: %w", err)
	}
	return resp, nil
}
