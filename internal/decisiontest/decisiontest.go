// Package decisiontest reads the X-Egressd-Decision header of a refusal
// ("deny; reason=no_matching_rule; rule=pypi") for tests: one parser of
// the proxy's machine-readable answer instead of one per test package.
package decisiontest

import (
	"net/http"
	"strings"
)

// Header is the header's name.
const Header = "X-Egressd-Decision"

// Decision is the header's fields; a missing one is "".
type Decision struct {
	Verdict string // "deny"
	Reason  string
	Rule    string
}

// Parse reads a header value: the verdict, then "; key=value" fields in
// any order. Fields it does not know are ignored.
func Parse(v string) Decision {
	fields := strings.Split(v, ";")
	d := Decision{Verdict: strings.TrimSpace(fields[0])}
	for _, f := range fields[1:] {
		k, val, _ := strings.Cut(strings.TrimSpace(f), "=")
		switch k {
		case "reason":
			d.Reason = val
		case "rule":
			d.Rule = val
		}
	}
	return d
}

// Of parses h's decision header.
func Of(h http.Header) Decision { return Parse(h.Get(Header)) }

// Reason is the reason in h's decision header, "" if there is none.
func Reason(h http.Header) string { return Of(h).Reason }
