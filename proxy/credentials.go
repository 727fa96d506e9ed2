package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"

	"github.com/egressd/egressd/dnsguard"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/broker"
)

// Credential brokering on the shared request path (plain HTTP and the
// inner requests of inspected tunnels alike): the allowing rule's actions
// are checked against the request before it is audited
// (prepareCredentials), applied to the upstream request
// (applyCredentials), and the response is scrubbed of secrets
// (scrubResponse). Package broker does the work; this file decides
// where a secret may travel.

// prepareCredentials checks the request as the sandbox sent it against
// the credential actions of the rule that allowed it. A refusal carries
// the rule, so the record says which rule the placeholder did not fit.
func (f *httpFlow) prepareCredentials(r *http.Request, d *policy.Decision) (refusal, bool) {
	plan, reason := broker.Prepare(d.Credentials, f.s.secrets.Load(), r.Header, f.target.Path, f.target.Query)
	if reason != "" {
		return refusalFor(stagePolicy, policy.Decision{Reason: reason, Rule: d.Rule, Policy: d.Policy}, nil), true
	}
	if plan != nil {
		if reason := plan.Refuse(r.Method, r.Header); reason != "" {
			return refusalFor(stagePolicy, policy.Decision{Reason: reason, Rule: d.Rule, Policy: d.Policy}, nil), true
		}
		f.cred = plan
		f.credentials = plan.Applied
		f.scrub = plan.Scrubber()
		// r's header is what the upstream request is built from.
		plan.KeepPlaced(r.Header)
	}
	return refusal{}, false
}

// applyCredentials puts the secrets into the upstream request.
func (f *httpFlow) applyCredentials(out *http.Request) {
	if f.cred != nil {
		out.URL.RawQuery = f.cred.Apply(out.Header, out.URL.RawQuery)
	}
}

// cleartextCredential reports a request that carries a secret without
// TLS: a plain-HTTP request (an inspected one has scheme https; an
// absolute-form https:// request never gets this far). It may only be
// sent to an address an internal: entry allowed (sendInternal).
func (f *httpFlow) cleartextCredential() bool {
	return f.cred.Carries() && f.target.Scheme != "https"
}

// vetter is the part of *dnsguard.Dialer that resolves an address and
// checks it against the floor without dialling.
type vetter interface {
	Vet(ctx context.Context, address string) ([]netip.Addr, uint16, error)
}

// sendInternal sends a request carrying a secret over plain HTTP on a
// fresh connection to an address that is not public: the pinned dialer
// passed it through the floor, so a non-public address is one an
// internal: entry allows. With a dialer that vets (the daemon's) the
// addresses are decided before anything is dialled, and a vetted address
// is dialled, not the name again; the connection's address is checked
// once more before a byte is written. The connection carries this request
// only ("Connection: close", never pooled): a secret never shares a
// connection with a request the sandbox framed.
func (f *httpFlow) sendInternal(req *http.Request) (*http.Response, string, error) {
	req.Close = true
	p := f.st.up
	ctx := req.Context()
	key := req.URL.Host
	targets := []string{key}
	if v, ok := f.s.dialer.(vetter); ok {
		addrs, port, err := v.Vet(ctx, key)
		if err != nil {
			return nil, "", err
		}
		targets = targets[:0]
		for _, a := range addrs {
			if dnsguard.Classify(a) == dnsguard.Public {
				return nil, a.String(), cleartextDenied(a.String())
			}
			targets = append(targets, netip.AddrPortFrom(a, port).String())
		}
	}
	var c net.Conn
	var errs []error
	for _, t := range targets {
		var err error
		if c, err = p.dial(ctx, "tcp", t); err == nil {
			break
		}
		errs = append(errs, err)
	}
	if c == nil {
		return nil, "", errors.Join(errs...)
	}
	pc := p.wrap(key, c)
	if a, err := netip.ParseAddr(pc.ip); err != nil || dnsguard.Classify(a) == dnsguard.Public {
		pc.close()
		return nil, pc.ip, cleartextDenied(pc.ip)
	}
	resp, err := p.send(ctx, pc, req)
	return resp, pc.ip, err
}

func cleartextDenied(ip string) error {
	return &policy.DenyError{Reason: policy.ReasonCredentialCleartext,
		Detail: "plain-HTTP request carrying a secret resolved to public address " + ip}
}

// scrubResponse scrubs the response of a request whose rule binds
// credentials, whether or not this request carried one: a secret sent
// earlier may come back later. A body it cannot scrub is refused.
func (f *httpFlow) scrubResponse(resp *http.Response) (refusal, bool) {
	if f.cred == nil {
		return refusal{}, false
	}
	if err := f.cred.Scrub(resp); err != nil {
		rf := refusalOf(policy.ReasonCredentialUnscrubbable)
		rf.detail = err.Error()
		return rf, true
	}
	return refusal{}, false
}
