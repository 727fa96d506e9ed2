package proxy

import (
	"cmp"
	"context"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/policy"
)

// stage says where a refusal came from; the same typed error means a 400
// when the client's request could not be parsed and a 403 when the address
// floor refused a destination.
type stage uint8

const (
	stageParse stage = iota + 1
	stagePolicy
	stageDial
)

// refusal is everything a deny response and its audit record carry: the
// status the client reads, and the verdict its decision record says.
type refusal struct {
	status int
	verdict
	// agentBody, when set, replaces the text body with an answer in the
	// protocol the client speaks (an MCP JSON-RPC error, JSON).
	agentBody []byte
	// retryAfter, when set, is when a budget refusal may be retried.
	retryAfter time.Duration
}

// refusalFor is the one place an error or a policy decision becomes a client
// status and reason.
func refusalFor(st stage, d policy.Decision, err error) refusal {
	if err == nil {
		rf := deniedRefusal(cmp.Or(d.Reason, policy.ReasonNoMatchingRule))
		rf.Rule, rf.Policy = d.Rule, d.Policy
		return rf
	}
	var de *policy.DenyError
	if errors.As(err, &de) {
		status := http.StatusForbidden
		if st == stageParse {
			status = http.StatusBadRequest
		}
		return refusal{status: statusForReason(status, de.Reason), verdict: verdict{Verdict: audit.Verdict{Reason: de.Reason}, detail: de.Error()}}
	}
	var dnsErr *net.DNSError
	rf := refusalOf(policy.ReasonUpstreamUnreachable)
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), isTimeout(err):
		rf = refusalOf(policy.ReasonUpstreamTimeout)
	case errors.As(err, &dnsErr):
		rf = refusalOf(policy.ReasonDNSFailure)
	case isUpstreamTLS(err):
		rf = refusalOf(policy.ReasonUpstreamTLS)
	}
	rf.detail = err.Error()
	return rf
}

// deniedRefusal is the refusal of a request a check (authentication, a
// limit, the policy) denied after it was read.
func deniedRefusal(reason policy.Reason) refusal {
	return refusal{status: statusForReason(http.StatusForbidden, reason), verdict: verdict{Verdict: audit.Verdict{Reason: reason}}}
}

// statusForReason is the status policy's reason table gives reason. A
// refusal of the request itself (class policy or malformed) is def: 400
// while the request is parsed, 403 once it was read and a later check, such
// as the dialer's, refused it.
func statusForReason(def int, reason policy.Reason) int {
	switch reason.Class() {
	case policy.ClassPolicy, policy.ClassMalformed:
		return def
	}
	return reason.Codes().HTTP
}

// refusalOf is a refusal whose status is the one the reason table gives.
func refusalOf(reason policy.Reason) refusal {
	return refusal{status: reason.Codes().HTTP, verdict: verdict{Verdict: audit.Verdict{Reason: reason}}}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// decisionHeader is the X-Egressd-Decision value of a refusal:
// machine-readable, with the same fields as the body.
func decisionHeader(reason policy.Reason, rule string) string {
	h := "deny; reason=" + string(reason)
	if rule != "" {
		h += "; rule=" + rule
	}
	return h
}

// body is the short text/plain explanation a refused client reads. It names
// only the reason, the rule and the request id: never an address.
func (r refusal) body(requestID string) string {
	rule := r.Rule
	if rule == "" {
		rule = "none"
	}
	return "egressd: denied: " + string(r.Reason) + " (rule " + rule + ", request " + requestID + ")\n"
}

// answer is the refusal's body and its Content-Type for a client whose
// request said accept (its Accept values, joined): the protocol answer
// when the refusal has one, JSON for a client that asks for it, else the
// text line.
func (r refusal) answer(accept, requestID string) (body, contentType string) {
	switch {
	case r.agentBody != nil:
		return string(r.agentBody), "application/json"
	case acceptsJSON(accept):
		retry := 0
		if r.retryAfter > 0 {
			retry = int((r.retryAfter + time.Second - 1) / time.Second)
		}
		return string(policy.DenialJSON(r.Reason, r.Rule, requestID, retry)) + "\n", "application/json"
	}
	return r.body(requestID), "text/plain; charset=utf-8"
}

// acceptsJSON reports whether an Accept header lists application/json
// (with a q other than 0); "*/*" alone keeps the text line people read.
func acceptsJSON(accept string) bool {
	for accept != "" {
		var part string
		part, accept, _ = strings.Cut(accept, ",")
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || mt != "application/json" {
			continue
		}
		if q, ok := params["q"]; ok {
			if v, err := strconv.ParseFloat(q, 64); err != nil || v <= 0 {
				continue
			}
		}
		return true
	}
	return false
}

// acceptOf is r's Accept values as one list.
func acceptOf(r *http.Request) string {
	if r == nil {
		return ""
	}
	return strings.Join(r.Header.Values("Accept"), ",")
}

// header fills h for a refusal response of contentType.
func (r refusal) header(h http.Header, requestID, contentType string) {
	h.Set("Content-Type", contentType)
	h.Set("X-Egressd-Decision", decisionHeader(r.Reason, r.Rule))
	h.Set("X-Egressd-Request", requestID)
	h.Set("Cache-Control", "no-store")
	if r.status == http.StatusProxyAuthRequired {
		h.Set("Proxy-Authenticate", `Basic realm="egressd"`)
	}
	if r.closes() {
		h.Set("Connection", "close")
	}
	if r.retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int((r.retryAfter+time.Second-1)/time.Second)))
	}
}

// serve answers req with the refusal through w.
func (r refusal) serve(w http.ResponseWriter, req *http.Request, requestID string) {
	body, ctype := r.answer(acceptOf(req), requestID)
	r.header(w.Header(), requestID, ctype)
	w.WriteHeader(r.status)
	_, _ = io.WriteString(w, body) // the refusal is audited; a client gone before reading it changes nothing
}

// closes reports whether the connection ends after this refusal: a client
// that failed to authenticate, sent what is not a proxy request, or is
// refused per source would otherwise pipeline thousands of refusals down
// one connection, each costing a decision and a record.
func (r refusal) closes() bool {
	return r.status == http.StatusBadRequest || r.status == http.StatusProxyAuthRequired ||
		r.Reason == policy.ReasonSourceRateLimited
}

// response builds the refusal as an *http.Response for goproxy's request
// and response hooks.
func (r refusal) response(req *http.Request, requestID string) *http.Response {
	body, ctype := r.answer(acceptOf(req), requestID)
	resp := &http.Response{
		Status:        strconv.Itoa(r.status) + " " + http.StatusText(r.status),
		StatusCode:    r.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        make(http.Header, 6),
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
	r.header(resp.Header, requestID, ctype)
	return resp
}

// write sends the refusal on a raw (hijacked) connection as an HTTP/1.1
// response to a request that said accept, then the caller closes the
// connection.
func (r refusal) write(w interface{ Write([]byte) (int, error) }, accept, requestID string) error {
	h := make(http.Header, 6)
	body, ctype := r.answer(accept, requestID)
	r.header(h, requestID, ctype)
	h.Set("Connection", "close")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	var b strings.Builder
	b.WriteString("HTTP/1.1 ")
	b.WriteString(strconv.Itoa(r.status))
	b.WriteByte(' ')
	b.WriteString(http.StatusText(r.status))
	b.WriteString("\r\n")
	if err := h.Write(&b); err != nil {
		return err
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	_, err := w.Write([]byte(b.String()))
	return err
}
