package broker

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"

	"github.com/egressd/egressd/policy"
)

// Carries reports whether a secret goes upstream with the request.
func (p *Plan) Carries() bool { return p != nil && len(p.Applied) > 0 }

// Apply puts the secrets into the upstream request: h is its header (the
// sandbox's values of a header an action sets are dropped), and the
// returned raw query replaces rawQuery. Parameters no action names keep
// their bytes.
func (p *Plan) Apply(h http.Header, rawQuery string) string {
	queryActions := false
	for i := range p.actions {
		if !p.apply[i] {
			continue
		}
		a := &p.actions[i]
		v, _ := p.secrets.Value(a.Secret)
		kind, name := a.Place()
		switch {
		case a.Basic != nil:
			h[name] = []string{"Basic " + basicToken(a.Basic.User, v)}
		case a.Header != "":
			f := a.Format
			if f == "" {
				f = "{}"
			}
			h[name] = []string{strings.Replace(f, "{}", v, 1)}
		case kind == policy.PlaceHeader:
			vs := h[name]
			for j := range vs {
				vs[j] = strings.ReplaceAll(vs[j], Marker+a.Secret, v)
			}
		default:
			queryActions = true
		}
	}
	filterAcceptEncoding(h)
	if !queryActions {
		return rawQuery
	}
	var b strings.Builder
	first := true
	eachParam(rawQuery, func(q *param) {
		if !first {
			b.WriteByte('&')
		}
		first = false
		if q.ok {
			if swapped := p.swapQuery(q.key, q.value); swapped != q.value {
				b.WriteString(q.rawKey)
				b.WriteByte('=')
				b.WriteString(url.QueryEscape(swapped))
				return
			}
		}
		b.WriteString(q.raw)
	})
	return b.String()
}

func (p *Plan) swapQuery(key, value string) string {
	for i := range p.actions {
		a := &p.actions[i]
		if !p.apply[i] || a.Placeholder == "" {
			continue
		}
		if kind, name := a.Place(); kind == policy.PlaceQuery && name == key {
			v, _ := p.secrets.Value(a.Secret)
			value = strings.ReplaceAll(value, Marker+a.Secret, v)
		}
	}
	return value
}

func basicToken(user, secret string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + secret))
}

// acceptedEncodings are the content codings whose bodies the scrubber can
// read: a request carrying a secret asks for no other, so that an echo
// comes back in a form that can be scrubbed.
var acceptedEncodings = map[string]bool{"gzip": true, "x-gzip": true, "deflate": true, "identity": true}

// filterAcceptEncoding drops the codings the scrubber cannot read (br,
// zstd, …) from Accept-Encoding.
func filterAcceptEncoding(h http.Header) {
	vs, ok := h["Accept-Encoding"]
	if !ok {
		return
	}
	var keep []string
	for _, v := range vs {
		for _, tok := range strings.Split(v, ",") {
			name, _, _ := strings.Cut(tok, ";")
			if acceptedEncodings[strings.ToLower(strings.TrimSpace(name))] {
				keep = append(keep, strings.TrimSpace(tok))
			}
		}
	}
	if len(keep) == 0 {
		delete(h, "Accept-Encoding")
		return
	}
	h["Accept-Encoding"] = []string{strings.Join(keep, ", ")}
}

// KeepPlaced removes from h's Connection header the names of the headers
// the plan puts a secret into, before the hop-by-hop headers are stripped:
// a header the sandbox lists there would be dropped after the decision
// record named its secret as sent. Where a secret goes is the rule's
// call, not the sandbox's.
func (p *Plan) KeepPlaced(h http.Header) {
	vs, ok := h["Connection"]
	if !ok {
		return
	}
	var keep []string
	for _, v := range vs {
		for _, tok := range strings.Split(v, ",") {
			if tok = strings.TrimSpace(tok); tok != "" && !p.places(tok) {
				keep = append(keep, tok)
			}
		}
	}
	if len(keep) == 0 {
		delete(h, "Connection")
		return
	}
	h["Connection"] = []string{strings.Join(keep, ", ")}
}

// places reports whether an applied action puts a secret into header
// name.
func (p *Plan) places(name string) bool {
	for i := range p.actions {
		if kind, n := p.actions[i].Place(); p.apply[i] && kind == policy.PlaceHeader && strings.EqualFold(n, name) {
			return true
		}
	}
	return false
}

// Refuse returns policy.ReasonCredentialUnsafeRequest for a request whose
// answer the scrubber cannot vouch for, before anything is sent: TRACE
// (the upstream echoes the request, injected secret and all, as
// message/http) and, unless an action of the rule sets allow_range, Range
// or If-Range (pieces of an echo, each scrubbed alone, can together spell
// the secret). It returns "" for any other request.
func (p *Plan) Refuse(method string, h http.Header) policy.Reason {
	if method == http.MethodTrace {
		return policy.ReasonCredentialUnsafeRequest
	}
	if _, ranged := h["Range"]; !ranged {
		if _, ranged = h["If-Range"]; !ranged {
			return ""
		}
	}
	for i := range p.actions {
		if p.actions[i].AllowRange {
			return ""
		}
	}
	return policy.ReasonCredentialUnsafeRequest
}
