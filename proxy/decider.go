package proxy

import (
	"net"
	"net/netip"
	"net/url"
	"strconv"

	"github.com/egressd/egressd/policy"
)

// The pre-dial decision (facts, address floor, policy) is policy.PreDial,
// shared with `egressd check`; this file is what the proxy makes of its
// outcome: where to dial, and how to refuse.

// Target is the destination of a request, for dialling and the audit log.
type Target struct {
	Scheme string
	Host   string
	Port   uint16
	// Path is the path the policy decided, exactly as the client sent it.
	Path string
	// Query is the raw query, exactly as sent.
	Query string
	// IP is set when Host is an IP literal.
	IP netip.Addr
}

// targetOf reads the normalized destination out of the policy package's
// facts, so the proxy dials what the policy decided. Facts of a request
// that could not be parsed (nil) name no target.
func targetOf(f policy.Facts) Target {
	switch f := f.(type) {
	case *policy.URLFacts:
		return Target{Scheme: f.Scheme, Host: f.Host, Port: f.Port, Path: f.Path, Query: f.Query, IP: f.IP}
	case *policy.ConnectFacts:
		return Target{Host: f.Host, Port: f.Port, IP: f.IP}
	}
	return Target{}
}

// outcomeRefusal maps a denied pre-dial outcome to its response.
func outcomeRefusal(o *policy.Outcome) refusal {
	st := stagePolicy
	if o.ParseRefused {
		st = stageParse
	}
	return refusalFor(st, o.Decision, o.Err)
}

// url is the target as a URL (host:port, the path and query as sent),
// for resolving URLs an upstream names against it.
func (t Target) url() url.URL {
	u := url.URL{Scheme: t.Scheme, Host: net.JoinHostPort(t.Host, strconv.Itoa(int(t.Port))), RawQuery: t.Query}
	if p, err := url.PathUnescape(t.Path); err == nil {
		u.Path, u.RawPath = p, t.Path
	}
	return u
}
