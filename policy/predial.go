package policy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Floor is the address check no policy can override (*dnsguard.Floor). It
// enters this package as an interface so that dnsguard, which builds on
// policy, can provide it without an import cycle.
type Floor interface {
	Check(a netip.Addr, port uint16) error
}

// PreDial is the pre-dial decision path shared by the proxy listener and
// `egressd check http|connect`: parse the request into facts, apply the
// address floor to IP-literal hosts, then ask the policy. A check therefore
// answers exactly what the proxy would do before it dials.
type PreDial struct {
	Engine Decider
	Floor  Floor
}

// Outcome is the pre-dial answer.
type Outcome struct {
	// Facts are the parsed request; nil when parsing failed.
	Facts Facts
	// Decision is the answer; on a refusal found outside Rego (parse, floor)
	// Allow is false and Reason is the DenyError's reason.
	Decision Decision
	// Err is the *DenyError of a parse or floor refusal, else nil.
	Err error
	// ParseRefused says the request itself was refused while it was read
	// (the proxy answers 400), not its destination (403).
	ParseRefused bool
	// Inspected says the request was decided as one inside a terminated
	// (inspected) CONNECT tunnel.
	Inspected bool
}

// HTTPRequest is an HTTP request as its client sent it, before it is
// parsed into facts.
type HTTPRequest struct {
	Method string
	// Target is the request-target: absolute-form ("http://host/path"), or
	// inside an inspected tunnel origin-form ("/path?q") too.
	Target string
	// HostHeader is the Host header (HTTP/2 :authority); "" if none was
	// sent.
	HostHeader string
	// Body is the request's body, nil when it has none. It is read (up
	// to a rule's bound, decoded of ContentEncoding) only where a rule may
	// decide on it; the caller then forwards what was read.
	Body            io.Reader
	ContentType     string
	ContentEncoding string
}

// DecideHTTP decides an absolute-form request (kind KindHTTP) or a
// redirect target (KindRedirect) for id.
func (d *PreDial) DecideHTTP(ctx context.Context, id Identity, kind Kind, req HTTPRequest) Outcome {
	f, err := ParseHTTP(kind, req.Method, req.Target, req.HostHeader)
	if err != nil {
		return refusedOutcome(nil, true, err)
	}
	if kind == KindHTTP && f.Scheme == "https" {
		// An absolute-form https:// request would make the proxy originate
		// TLS the client cannot verify; clients must CONNECT instead. A
		// redirect to https:// is decided: the client follows it with a
		// CONNECT that is decided again.
		return refusedOutcome(f, true, &DenyError{Reason: ReasonHTTPSRequiresConnect})
	}
	return d.decideRequest(ctx, id, f, req)
}

// DecideInspected decides a request inside a terminated CONNECT tunnel to
// authority (the CONNECT's "host:port", already allowed with inspection):
// the request-target (origin-form "/path?q", or absolute-form) becomes an
// https:// URL of that authority, decided by the same rules as a plain
// request. A Host header (HTTP/2 :authority) or absolute-form target
// naming another host or port carries the host_mismatch flag, which the
// bundle refuses: domain fronting would reach another tenant of the
// upstream than the one the tunnel was decided for.
func (d *PreDial) DecideInspected(ctx context.Context, id Identity, authority string, req HTTPRequest) Outcome {
	target, hostHeader := req.Target, req.HostHeader
	if strings.HasPrefix(req.Target, "/") {
		target = "https://" + authority + req.Target
	} else {
		// Absolute-form: its authority is what a server routes by, so it
		// is checked against the tunnel's.
		hostHeader = authority
	}
	f, err := ParseHTTP(KindHTTP, req.Method, target, hostHeader)
	if err != nil {
		o := refusedOutcome(nil, true, err)
		o.Inspected = true
		return o
	}
	if f.Scheme != "https" {
		f.HostMismatch = true
	}
	if f.HostMismatch {
		// Refused here, whatever the bundle does with the flag: the
		// upstream is dialled for the request's host, which must be the
		// one the CONNECT was decided (and a leaf minted) for.
		o := refusedOutcome(f, false, &DenyError{Reason: ReasonHostMismatch, Detail: "request names another host than its inspected tunnel"})
		o.Inspected = true
		return o
	}
	o := d.decideRequest(ctx, id, f, req)
	o.Inspected = true
	return o
}

// DecideRequest answers what the proxy would do with a request as a client
// sends it, for `egressd check http`: an http:// URL is DecideHTTP's; an
// https:// URL goes through a CONNECT to its authority, so when that
// CONNECT would be inspected the request is decided as an inner request
// (DecideInspected), and otherwise it is refused as DecideHTTP refuses it.
func (d *PreDial) DecideRequest(ctx context.Context, id Identity, kind Kind, req HTTPRequest) Outcome {
	if target := req.Target; kind == KindHTTP && len(target) > len("https://") && strings.EqualFold(target[:len("https://")], "https://") {
		if f, err := ParseHTTP(kind, req.Method, target, ""); err == nil {
			authority := net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port)))
			if c := d.DecideConnect(ctx, id, authority); c.Decision.Allow && c.Decision.Inspect {
				rest := target[len("https://"):]
				path := "/"
				if i := strings.IndexAny(rest, "/?"); i >= 0 {
					path = rest[i:]
					if path[0] == '?' {
						path = "/" + path
					}
				}
				inner := req
				inner.Target = path
				if inner.HostHeader == "" {
					inner.HostHeader = authority
				}
				return d.DecideInspected(ctx, id, authority, inner)
			}
		}
	}
	return d.DecideHTTP(ctx, id, kind, req)
}

// DecideConnect decides a CONNECT authority ("host:port") for id.
func (d *PreDial) DecideConnect(ctx context.Context, id Identity, target string) Outcome {
	f, err := ParseConnect(target)
	if err != nil {
		return refusedOutcome(nil, true, err)
	}
	return d.decide(ctx, id, f, f.IP, f.Port)
}

// decideRequest decides an HTTP request, reading its body first where a
// rule may decide on it.
func (d *PreDial) decideRequest(ctx context.Context, id Identity, f *URLFacts, req HTTPRequest) Outcome {
	f.HasBody = req.Body != nil
	if e, ok := d.Engine.(BodyNeeder); ok && f.HasBody && f.Kind() == KindHTTP {
		if need := e.NeedBody(f); need.Max > 0 {
			if err := readBody(f, req, need); err != nil {
				return refusedOutcome(f, true, err)
			}
		}
	}
	o := d.decide(ctx, id, f, f.IP, f.Port)
	if b := f.Body; o.Decision.Allow && b != nil && b.MCP != nil && b.MCP.Batch {
		// Rego decides each call of a batch as it would the call alone
		// (input.mcp.tool, …): a rule on one call must not read a
		// batch's list and never fire. One refused call refuses all;
		// under observe mode, the first call that would be refused
		// speaks for the batch, so its record says would_deny.
		defer func() { b.call = 0 }()
		for i := range b.MCP.Calls {
			b.call = i + 1
			oi := d.decide(ctx, id, f, f.IP, f.Port)
			if !oi.Decision.Allow {
				return oi
			}
			if oi.Decision.WouldDeny != nil && o.Decision.WouldDeny == nil {
				o = oi
			}
		}
	}
	return o
}

func (d *PreDial) decide(ctx context.Context, id Identity, f Facts, ip netip.Addr, port uint16) Outcome {
	if ip.IsValid() {
		if err := d.Floor.Check(ip, port); err != nil {
			return refusedOutcome(f, false, err)
		}
	}
	return Outcome{Facts: f, Decision: d.Engine.Decide(ctx, Input{Identity: id, Facts: f})}
}

func refusedOutcome(f Facts, parse bool, err error) Outcome {
	o := Outcome{Facts: f, Err: err, ParseRefused: parse}
	var de *DenyError
	if errors.As(err, &de) {
		o.Decision.Reason = de.Reason
	} else {
		o.Decision.Reason = ReasonMalformedRequest
	}
	return o
}
