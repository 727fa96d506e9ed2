package proxy

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/broker"
	"github.com/egressd/egressd/proxy/secretpat"
)

// Secrets leaving in requests, on the shared request path (plain HTTP and
// the inner requests of inspected tunnels alike): after the policy allowed
// a request and before credentials are applied, its head as the sandbox
// sent it is searched (checkLeaks) for the values of the loaded secrets
// and for the secret patterns, and its body is searched as it streams
// (leakBody). A loaded value refuses the request, whatever the rule; a
// pattern is recorded, and refuses where the allowing rule or the
// identity says so (refusesPatterns). Package broker does the searching.

// leakFindings is what the searches of one request found, for its
// records; read by the record builders while the body may still stream.
type leakFindings struct {
	scan     broker.RequestScan
	mu       sync.Mutex
	secret   string // the loaded secret whose value refused the request
	patterns string // the patterns found in the head, comma-separated
	body     *broker.BodyScan
	// redact, when not nil, removes the patterns found in the head from
	// a record's fields (its path and query copy them).
	redact func(string) string
}

// names are the secret and the patterns (head and body) found so far.
func (l *leakFindings) names() (secret, patterns string) {
	l.mu.Lock()
	secret, patterns = l.secret, l.patterns
	body := l.body
	l.mu.Unlock()
	if body == nil {
		return secret, patterns
	}
	leak, bodyPats := body.Findings()
	if leak != nil && secret == "" {
		secret = leak.Secret
	}
	return secret, joinNames(patterns, bodyPats)
}

// joinNames adds names to the comma-separated list, each once.
func joinNames(list string, names []string) string {
	for _, n := range names {
		if !strings.Contains(","+list+",", ","+n+",") {
			if list != "" {
				list += ","
			}
			list += n
		}
	}
	return list
}

// refusesPatterns reports whether a secret pattern found in a request
// refuses it: the allowing rule's "secret_patterns": "refuse", or the
// identity's attribute secret_patterns: refuse.
func refusesPatterns(d *policy.Decision, id policy.Identity) bool {
	if d.Options != nil && d.Options.SecretPatterns == policy.SecretPatternsRefuse {
		return true
	}
	return id.Attributes[policy.SecretPatternsAttribute] == policy.SecretPatternsRefuse
}

// checkLeaks searches the request head as the sandbox sent it. It costs
// nothing when no secret is loaded and no pattern is configured. A
// refusal carries the rule that allowed the request; the findings go
// into the flow's records either way.
func (f *httpFlow) checkLeaks(r *http.Request, d *policy.Decision) (refusal, bool) {
	scan := broker.RequestScan{Secrets: f.s.secrets.Load(), Patterns: f.s.patterns}
	if scan.Off() {
		return refusal{}, false
	}
	scan.RefusePatterns = refusesPatterns(d, f.identity)
	f.leak = &leakFindings{scan: scan}
	found, err := scan.Head(r.RequestURI, r.Host, r.Header)
	var le *broker.LeakError
	if errors.As(err, &le) {
		f.leak.secret, f.leak.patterns = le.Secret, strings.Join(le.Patterns, ",")
		if le.Secret != "" && f.scrub == nil {
			// The record copies the target, which holds the value.
			f.scrub = scan.Secrets.Scrubber()
		}
		if le.Patterns != nil {
			f.leak.redact = redactor(scan.Patterns)
		}
		rf := refusalFor(stagePolicy, policy.Decision{Reason: policy.ReasonSecretInRequest, Rule: d.Rule, Policy: d.Policy}, nil)
		rf.detail = le.Error()
		return rf, true
	}
	if found != nil {
		f.leak.patterns = strings.Join(found, ",")
		f.leak.redact = redactor(scan.Patterns)
	}
	return refusal{}, false
}

// redactor replaces what ps finds in a record's field with the name of
// the pattern: a record names a pattern, never the token.
func redactor(ps *secretpat.Set) func(string) string {
	return func(v string) string {
		return ps.Redact(v, func(name string) string { return "«egressd:redacted:" + name + "»" })
	}
}

// leakBody is the body the upstream reads: searched as it streams when
// checkLeaks searched the head, body itself otherwise. A read failing at
// a secret ends the upstream request unfinished; RoundTrip's error then
// carries the *policy.DenyError to the completion record.
func (f *httpFlow) leakBody(body io.ReadCloser, h http.Header) io.ReadCloser {
	if f.leak == nil {
		return body
	}
	b := f.leak.scan.Body(body, strings.Join(h.Values("Content-Encoding"), ","))
	f.leak.mu.Lock()
	f.leak.body = b
	f.leak.mu.Unlock()
	return b
}

// leakCut is the reason and detail of a completion whose body was cut at
// a secret after the upstream had answered (RoundTrip carried no error
// then): secret_in_request all the same. Otherwise it returns "" and
// detail.
func (f *httpFlow) leakCut(detail string) (policy.Reason, string) {
	if f.leak == nil {
		return "", detail
	}
	f.leak.mu.Lock()
	body := f.leak.body
	f.leak.mu.Unlock()
	if body == nil {
		return "", detail
	}
	if leak, _ := body.Findings(); leak != nil {
		return policy.ReasonSecretInRequest, "request body cut: " + leak.Error()
	}
	return "", detail
}
