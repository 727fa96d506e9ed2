package proxy

import (
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
		return refusalFor(stagePolicy, policy.Decision{Reason: string(reason), Rule: d.Rule, Policy: d.Policy}, nil), true
	}
	if plan != nil {
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

// sendInternal sends a request carrying a secret over plain HTTP on a
// fresh connection whose dialled address is checked before a byte is
// written: the pinned dialer passed it through the floor, so a non-public
// address is one an internal: entry allows; a public one gets nothing.
func (f *httpFlow) sendInternal(req *http.Request) (*http.Response, string, error) {
	p := f.st.up
	key := req.URL.Host
	c, err := p.dial(req.Context(), "tcp", key)
	if err != nil {
		return nil, "", err
	}
	pc := p.wrap(key, c)
	if a, err := netip.ParseAddr(pc.ip); err != nil || dnsguard.Classify(a) == dnsguard.Public {
		pc.close()
		return nil, pc.ip, &policy.DenyError{Reason: policy.ReasonCredentialCleartext,
			Detail: "plain-HTTP request carrying a secret resolved to public address " + pc.ip}
	}
	resp, err := p.send(req.Context(), pc, req)
	return resp, pc.ip, err
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
