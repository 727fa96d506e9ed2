package policy

import (
	"context"
	"errors"
	"net/netip"
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
}

// DecideHTTP decides an absolute-form request (kind KindHTTP) or a
// redirect target (KindRedirect) for id.
func (d *PreDial) DecideHTTP(ctx context.Context, id Identity, kind Kind, method, target, hostHeader string) Outcome {
	f, err := ParseHTTP(kind, method, target, hostHeader)
	if err != nil {
		return refusedOutcome(nil, true, err)
	}
	if kind == KindHTTP && f.Scheme == "https" {
		// An absolute-form https:// request would make the proxy originate
		// TLS the client cannot verify; clients must CONNECT instead. A
		// redirect to https:// is decided: the client follows it with a
		// CONNECT that is decided again.
		return refusedOutcome(f, true, &DenyError{Reason: ReasonAbsoluteHTTPS})
	}
	return d.decide(ctx, id, f, f.IP, f.Port)
}

// DecideConnect decides a CONNECT authority ("host:port") for id.
func (d *PreDial) DecideConnect(ctx context.Context, id Identity, target string) Outcome {
	f, err := ParseConnect(target)
	if err != nil {
		return refusedOutcome(nil, true, err)
	}
	return d.decide(ctx, id, f, f.IP, f.Port)
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
		o.Decision.Reason = de.Reason.String()
	} else {
		o.Decision.Reason = string(ReasonMalformedRequest)
	}
	return o
}
