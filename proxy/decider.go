package proxy

import (
	"context"
	"errors"
	"net/netip"

	"github.com/egressd/egressd/policy"
)

// Floor is what the decider needs of *dnsguard.Floor: the address check
// that no policy can override.
type Floor interface {
	Check(a netip.Addr, port uint16) error
}

// Decider is the pre-dial decision path shared by the proxy listener and
// `egressd check http|connect`: parse the request into facts, apply the
// address floor to IP-literal hosts, then ask the policy. A check therefore
// answers exactly what the proxy would do before it dials.
type Decider struct {
	Engine policy.Decider
	Floor  Floor
}

// Outcome is the decider's answer.
type Outcome struct {
	// Facts are the parsed request; nil when parsing failed.
	Facts policy.Facts
	// Target is the normalized destination the facts name; its host and
	// port are what the proxy dials.
	Target Target
	// Decision is the answer; on a refusal found outside Rego (parse, floor)
	// Allow is false and Reason is the DenyError's reason.
	Decision policy.Decision
	// Err is the *policy.DenyError of a parse or floor refusal, else nil.
	Err   error
	stage stage
}

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

// DecideHTTP decides an absolute-form request (kind policy.KindHTTP) or a
// redirect target (policy.KindRedirect) for id.
func (d *Decider) DecideHTTP(ctx context.Context, id policy.Identity, kind policy.Kind, method, target, hostHeader string) Outcome {
	f, err := policy.ParseHTTP(kind, method, target, hostHeader)
	if err != nil {
		return refused(nil, Target{}, stageParse, err)
	}
	if kind == policy.KindHTTP && f.Scheme == "https" {
		// An absolute-form https:// request would make the proxy originate
		// TLS the client cannot verify; clients must CONNECT instead. A
		// redirect to https:// is decided: the client follows it with a
		// CONNECT that is decided again.
		return refused(f, urlTarget(f), stageParse, &policy.DenyError{Reason: policy.ReasonAbsoluteHTTPS})
	}
	return d.decide(ctx, id, f, urlTarget(f))
}

// DecideConnect decides a CONNECT authority ("host:port") for id.
func (d *Decider) DecideConnect(ctx context.Context, id policy.Identity, target string) Outcome {
	f, err := policy.ParseConnect(target)
	if err != nil {
		return refused(nil, Target{}, stageParse, err)
	}
	return d.decide(ctx, id, f, connectTarget(f))
}

func (d *Decider) decide(ctx context.Context, id policy.Identity, f policy.Facts, t Target) Outcome {
	if t.IP.IsValid() {
		if err := d.Floor.Check(t.IP, t.Port); err != nil {
			return refused(f, t, stagePolicy, err)
		}
	}
	dec := d.Engine.Decide(ctx, policy.Input{Identity: id, Facts: f})
	return Outcome{Facts: f, Target: t, Decision: dec, stage: stagePolicy}
}

func refused(f policy.Facts, t Target, st stage, err error) Outcome {
	o := Outcome{Facts: f, Target: t, Err: err, stage: st}
	var de *policy.DenyError
	if errors.As(err, &de) {
		o.Decision.Reason = de.Reason.String()
	} else {
		o.Decision.Reason = reasonMalformedRequest
	}
	return o
}

// refusal maps a denied outcome to its response.
func (o *Outcome) refusal() refusal {
	return refusalFor(o.stage, o.Decision, o.Err)
}
