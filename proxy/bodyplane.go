package proxy

import (
	"bytes"
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/llm"
	"github.com/egressd/egressd/policy/mcp"
	"github.com/egressd/egressd/proxy/budget"
)

// bodyNotes are what a request's body said, for its records: never the
// body, only names and a keyed digest.
type bodyNotes struct {
	mcpMethod, tool, rpcID, argsHMAC, model string
	tokensIn, tokensOut                     int64
	// rule is set on a request counted against a token budget: its
	// completion record names the rule, so that a start can rebuild the
	// budget from the log.
	rule string
}

// set copies the notes into r.
func (n *bodyNotes) set(r *audit.Record) {
	r.MCPMethod, r.Tool, r.RPCID, r.ArgsHMAC, r.Model = n.mcpMethod, n.tool, n.rpcID, n.argsHMAC, n.model
	r.TokensIn, r.TokensOut = n.tokensIn, n.tokensOut
	if r.Kind == audit.KindHTTPDone && n.rule != "" {
		r.Rule = n.rule
	}
}

// bodyOf is the body facts of an outcome, nil when no body was read.
func bodyOf(out *policy.Outcome) *policy.BodyFacts {
	if f, ok := out.Facts.(*policy.URLFacts); ok {
		return f.Body
	}
	return nil
}

// notesOf builds the record notes of b. A batch's calls are joined by ",".
func (s *Server) notesOf(b *policy.BodyFacts) *bodyNotes {
	if b == nil || (b.MCP == nil && b.LLM == nil) {
		return nil
	}
	n := &bodyNotes{}
	if b.LLM != nil {
		n.model = b.LLM.Model
	}
	if b.MCP != nil {
		var methods, tools, ids, digests []string
		for i := range b.MCP.Calls {
			c := &b.MCP.Calls[i]
			methods = append(methods, cmp.Or(c.Method, "response"))
			ids = append(ids, c.ID)
			if c.Method == "tools/call" {
				tools = append(tools, c.Tool)
				digests = append(digests, s.argsDigest(c.Arguments))
			}
		}
		n.mcpMethod, n.tool = strings.Join(methods, ","), strings.Join(tools, ",")
		n.rpcID, n.argsHMAC = strings.Join(ids, ","), strings.Join(digests, ",")
	}
	return n
}

// argsDigest is the HMAC-SHA256 (hex) of a tool call's arguments in
// canonical JSON (keys sorted, as ast.JSON and encoding/json write them),
// under the replica's local key: equal arguments compare equal whatever
// their key order, and short ones cannot be guessed from the record.
func (s *Server) argsDigest(v ast.Value) string {
	if v == nil || len(s.argsKey) == 0 {
		return ""
	}
	j, err := ast.JSON(v)
	if err != nil {
		return ""
	}
	b, err := json.Marshal(j)
	if err != nil {
		return ""
	}
	m := hmac.New(sha256.New, s.argsKey)
	m.Write(b)
	return hex.EncodeToString(m.Sum(nil))
}

// mcpRefusal is the JSON-RPC answer to a refused MCP request, so that the
// agent reads which call was refused and why, in the protocol it speaks,
// rather than an HTTP error its SDK reports as a broken transport.
func mcpRefusal(d *policy.Decision, req *mcp.Request, requestID string) (body []byte, status int) {
	refusal := func(reason policy.Reason) mcp.Refusal {
		return mcp.Refusal{Reason: reason.String(), Class: reason.Class().String(),
			Action: string(reason.Action()), Request: requestID}
	}
	refused := map[int]mcp.Refusal{}
	if d.Options != nil && d.Options.MCP != nil {
		for i, reason := range d.Options.MCP.Refusals(req) {
			refused[i] = refusal(reason)
		}
	}
	if len(refused) == 0 {
		// Refused by another rule (a Rego rule on input.mcp): every call.
		for i := range req.Calls {
			refused[i] = refusal(d.Reason)
		}
	}
	return mcp.ErrorBody(req, refused)
}

// tellRefusal answers a refused MCP request: on its session's stream when
// it is a POST of an HTTP+SSE session (its body then is 202 Accepted),
// else in its body.
func (s *Server) tellRefusal(rf *refusal, f *httpFlow, d *policy.Decision, req *mcp.Request) {
	body, status := mcpRefusal(d, req, f.id)
	if f.method == http.MethodPost && status == http.StatusOK && s.sse.inject(f.identity.ID, f.target, body) {
		rf.agentBody, rf.status = []byte{}, http.StatusAccepted
		return
	}
	rf.agentBody, rf.status = body, status
}

// maxAnswer bounds an MCP answer read whole to filter it: a tools/list
// answer is small, and a larger one is refused rather than passed
// unfiltered.
const maxAnswer = 8 << 20

// filterAnswer makes an MCP server's answer show the agent only the tools
// its rule allows, as JSON or as an event stream; an answer it cannot read
// (another content type or coding than those) is refused, since it may
// offer tools the agent must not see. A model API's answer is read for
// its usage on the way.
func (f *httpFlow) filterAnswer(resp *http.Response) (refusal, bool) {
	o := f.opts
	if o == nil || resp.Body == nil || resp.Body == http.NoBody {
		return refusal{}, false
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	coded := resp.Header.Get("Content-Encoding") != "" && !strings.EqualFold(resp.Header.Get("Content-Encoding"), "identity")
	switch {
	case o.MCP != nil:
		allow := func(tool string) bool { return mcp.ToolMatches(o.MCP.Tools, tool) }
		switch {
		case coded:
			return answerRefusal("an MCP answer in a content coding egressd does not read (" + resp.Header.Get("Content-Encoding") + ")"), true
		case ct == "text/event-stream" && f.method == http.MethodGet:
			// A GET stream may be an HTTP+SSE session, which refusals
			// travel on.
			f.s.sse.open(f.identity.ID, f.target.url(), resp, allow)
		case ct == "text/event-stream":
			resp.Body = readCloser{Reader: mcp.FilterSSE(resp.Body, allow), Closer: resp.Body}
			resp.ContentLength = -1
			resp.Header.Del("Content-Length")
		case ct == "application/json":
			b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
			if err == nil && len(b) > maxAnswer {
				err = fmt.Errorf("over %d bytes", maxAnswer)
			}
			if err == nil {
				b, err = mcp.FilterJSON(b, allow)
			}
			if err != nil {
				return answerRefusal("MCP answer: " + err.Error()), true
			}
			resp.Body = readCloser{Reader: bytes.NewReader(b), Closer: resp.Body}
			resp.ContentLength = int64(len(b))
			resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
		case ct == "" || resp.StatusCode >= 300 && !strings.HasSuffix(ct, "json"):
			// An empty answer (202 Accepted) or a non-JSON error page
			// offers no tools.
		default:
			return answerRefusal("an MCP answer of type " + ct + ", neither JSON nor an event stream"), true
		}
	case o.LLM != nil && f.model != nil:
		f.watchUsage(resp, ct, coded)
	}
	return refusal{}, false
}

// answerRefusal refuses an answer egressd cannot vouch for.
func answerRefusal(detail string) refusal {
	rf := refusalOf(policy.ReasonBodyUnparseable)
	rf.status = http.StatusBadGateway
	rf.detail = detail
	return rf
}

// maxUsageJSON bounds the JSON answer kept to read its usage; a larger
// one is settled at its reservation.
const maxUsageJSON = 4 << 20

// watchUsage reads a model answer's usage as it streams to the client and
// settles the request's reservation with it when the answer ends.
func (f *httpFlow) watchUsage(resp *http.Response, ct string, coded bool) {
	m := f.model
	if resp.StatusCode >= 400 {
		// A refused or failed call generates nothing (the APIs do not
		// bill them): its reservation is given back.
		f.settleUsage(llm.Usage{Found: true})
		return
	}
	if coded || resp.StatusCode >= 300 {
		return
	}
	if ct == "text/event-stream" {
		resp.Body = readCloser{Reader: llm.UsageSSE(m.API, m.Endpoint, resp.Body, f.settleUsage), Closer: resp.Body}
		return
	}
	resp.Body = readCloser{Reader: &usageTee{r: resp.Body, done: func(b []byte) {
		f.settleUsage(llm.UsageJSON(m.API, m.Endpoint, b))
	}}, Closer: resp.Body}
}

// usageTee keeps up to maxUsageJSON bytes of what passes and hands them
// over at EOF.
type usageTee struct {
	r    io.Reader
	buf  []byte
	done func([]byte)
}

func (t *usageTee) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if len(t.buf)+n <= maxUsageJSON {
		t.buf = append(t.buf, p[:n]...)
	}
	if errors.Is(err, io.EOF) && t.done != nil {
		t.done(t.buf)
		t.done = nil
	}
	return n, err
}

// prepareModel applies a model rule's keys to an allowed request: it sets
// the output cap of a request over it ("excess": "clamp"), asks a stream
// for its usage where the API needs asking, and reserves the request's
// most tokens against the identity's budget, refusing it past the budget.
func (f *httpFlow) prepareModel(r *http.Request, out *policy.Outcome) (refusal, bool) {
	o, b := out.Decision.Options, bodyOf(out)
	if o == nil || o.LLM == nil || b == nil || b.LLM == nil {
		return refusal{}, false
	}
	l, m := o.LLM, b.LLM
	f.model = m
	var setMax int64
	if l.Excess == "clamp" && (!m.HasMax || m.Reserve() > l.MaxOutputTokens) {
		// The cap bounds the output of all the request's choices.
		setMax = l.MaxOutputTokens / max(1, m.Choices)
	}
	wantUsage := m.Stream && !m.IncludeUsage
	if setMax > 0 || wantUsage {
		body, err := llm.Rewrite(b.JSON, m, setMax, wantUsage)
		if err != nil {
			rf := deniedRefusal(policy.ReasonBodyUnparseable)
			rf.Rule, rf.Policy, rf.detail = out.Decision.Rule, out.Decision.Policy, "rewriting the model request: "+err.Error()
			return rf, true
		}
		if setMax > 0 {
			m.MaxOutputTokens, m.HasMax = setMax, true
		}
		r.Body = readCloser{Reader: bytes.NewReader(body), Closer: r.Body}
		r.ContentLength = int64(len(body))
		r.TransferEncoding = nil
		r.Header.Del("Content-Encoding")
	}
	if l.Budget == nil {
		return refusal{}, false
	}
	reserve := reservation(m, b)
	var res *budget.Reservation
	var retry time.Duration
	ok := false
	if f.s.budgets != nil {
		res, retry, ok = f.s.budgets.Reserve(budget.Key{Identity: f.identity.ID, Scope: out.Decision.Rule}, l.Budget.Tokens, l.Budget.Per, reserve)
	}
	if !ok {
		rf := deniedRefusal(policy.ReasonTokenBudgetExceeded)
		rf.Rule, rf.Policy, rf.retryAfter = out.Decision.Rule, out.Decision.Policy, retry
		rf.detail = fmt.Sprintf("reserving %d tokens of the budget of %d per %s", reserve, l.Budget.Tokens, l.Budget.Per)
		return rf, true
	}
	f.reserve, f.reserved = res, reserve
	f.notes.rule = out.Decision.Rule
	return refusal{}, false
}

// settleUsage records a model answer's usage and settles the request's
// reservation with it; an answer that reported none keeps its whole
// reservation spent.
func (f *httpFlow) settleUsage(u llm.Usage) {
	if u.Found {
		f.notes.tokensIn, f.notes.tokensOut = u.Input, u.Output
		f.s.metrics.countTokens(f.flowInfo.identity, f.model.Model, u.Input, u.Output)
	}
	if f.reserve != nil && !f.settled {
		f.settled = true
		if u.Found {
			f.reserve.Settle(u.Input + u.Output)
		} else {
			f.reserve.Settle(f.reserved)
		}
	}
}

// settleAtEnd settles a reservation its answer's usage did not: released
// when no answer came (nothing was spent), kept whole otherwise.
func (f *httpFlow) settleAtEnd() {
	if f.reserve == nil || f.settled {
		return
	}
	f.settled = true
	if f.recv == nil {
		f.reserve.Release()
		return
	}
	f.reserve.Settle(f.reserved)
}

// reservation is what a model request holds of its identity's budget
// until its answer reports the usage: its most output tokens, and its
// input estimated at a token per 4 bytes of body (tokenizers average
// about 4 bytes a token on text; the body's JSON makes that an
// overestimate). Concurrent requests overshoot a budget only by what
// their answers used beyond this.
func reservation(m *llm.Request, b *policy.BodyFacts) int64 {
	return m.Reserve() + int64(b.Size)/4 + 1
}
