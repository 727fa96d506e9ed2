package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/egressd/egressd/policy/bodyfacts"
	"github.com/egressd/egressd/policy/llm"
	"github.com/egressd/egressd/policy/mcp"
)

// BodyFacts are what a request's body says, read only where a rule may
// decide on it (see BodyNeed). Rego sees them as input.body (the JSON
// value), input.mcp and input.llm.
type BodyFacts struct {
	// JSON is the body parsed; nil when it is not JSON and no rule needs
	// it to be.
	JSON ast.Value
	// MCP is the body read as MCP JSON-RPC, where a rule has "mcp".
	MCP *mcp.Request
	// LLM is the body read as a model API request, where a rule has
	// "llm".
	LLM *llm.Request
	// Size is the body's length as decided on (decoded).
	Size int
	// call, when set, is the call of an MCP batch (from 1) that
	// input.mcp shows, for the decision of that call alone.
	call int
}

// BodyNeed is what egressd must read of a request before deciding it.
type BodyNeed struct {
	// Max bounds the read; 0: the body is not read, it streams.
	Max int64
	// JSON says the body must be JSON (a rule's mcp or llm key).
	JSON bool
	// MCP and LLM say which rule keys apply: parse the body so.
	MCP bool
	LLM string
}

// needBody is what the active bundle needs of f's body: the request keys
// of the views that may decide it (its host, port and path), and the
// bundle's own Rego rules on input.body, input.mcp and input.llm scoped
// to its host and port (bodyScopes).
func (c *compiled) needBody(f *URLFacts) BodyNeed {
	n := c.views.needBody(f)
	if c.bodyScopes.covers(f.Host, f.Port) && n.Max < DefaultMaxBodyBytes {
		n.Max = DefaultMaxBodyBytes
	}
	return n
}

// NeedBody is what the active bundle needs read of f's body before
// deciding it.
func (e *Engine) NeedBody(f *URLFacts) BodyNeed { return e.cur.needBody(f) }

// readBody reads the body of req under need into f.Body. The error is a
// *DenyError: body_too_large or body_unparseable.
func readBody(f *URLFacts, req HTTPRequest, need BodyNeed) error {
	b, err := bodyfacts.Read(req.Body, req.ContentEncoding, need.Max)
	if err != nil {
		reason := ReasonBodyUnparseable
		if errors.Is(err, bodyfacts.ErrTooLarge) {
			reason = ReasonBodyTooLarge
		}
		return &DenyError{Reason: reason, Detail: "request body: " + err.Error()}
	}
	bf := &BodyFacts{Size: len(b)}
	f.Body = bf
	if !need.JSON && !isJSONType(req.ContentType) {
		return nil
	}
	if bf.JSON, err = bodyfacts.ParseJSON(b); err != nil {
		return &DenyError{Reason: ReasonBodyUnparseable, Detail: "request body: " + err.Error()}
	}
	if need.MCP {
		if bf.MCP, err = mcp.Parse(bf.JSON); err != nil {
			return &DenyError{Reason: ReasonBodyUnparseable, Detail: "MCP request: " + err.Error()}
		}
	}
	if need.LLM != "" {
		// The path as sent upstream: llm refuses spellings a server could
		// route otherwise than the endpoint decided.
		bf.LLM, err = llm.Parse(need.LLM, f.Path, bf.JSON)
		switch {
		case errors.Is(err, llm.ErrUnknownEndpoint):
			return &DenyError{Reason: ReasonModelDenied, Detail: fmt.Sprintf("%s is not a %s model endpoint egressd decides: %v", f.PathDecoded, need.LLM, err)}
		case err != nil:
			return &DenyError{Reason: ReasonBodyUnparseable, Detail: "model request: " + err.Error()}
		}
	}
	return nil
}

// isJSONType reports a JSON media type: application/json or any +json.
func isJSONType(ct string) bool {
	t, _, err := mime.ParseMediaType(ct)
	return err == nil && (t == "application/json" || strings.HasSuffix(t, "+json"))
}

// Keys of the body facts in the Rego input.
var (
	termBody = ast.StringTerm("body")
	termMCP  = ast.StringTerm("mcp")
	termLLM  = ast.StringTerm("llm")
)

// addTo inserts input.body, input.mcp and input.llm.
func (b *BodyFacts) addTo(in ast.Object) {
	if b.JSON != nil {
		in.Insert(termBody, ast.NewTerm(b.JSON))
	}
	switch {
	case b.MCP != nil && b.call > 0:
		in.Insert(termMCP, b.MCP.CallTerm(b.call-1))
	case b.MCP != nil:
		in.Insert(termMCP, b.MCP.Term())
	}
	if b.LLM != nil {
		in.Insert(termLLM, b.LLM.Term())
	}
}

// bodyVerdict is the refusal the request keys o give the body facts b,
// or "" when they pass. A request without a body (an MCP GET stream, a
// model list) passes: it carries no call.
func bodyVerdict(o *RuleOptions, b *BodyFacts) Reason {
	if o == nil || b == nil {
		return ""
	}
	if o.MCP != nil && b.MCP != nil {
		for i := range b.MCP.Calls {
			if r := o.MCP.refusal(&b.MCP.Calls[i]); r != "" {
				return r
			}
		}
	}
	if l := o.LLM; l != nil && b.LLM != nil {
		r := b.LLM
		if !llm.ModelMatches(l.Models, r.Model) {
			return ReasonModelDenied
		}
		if l.Excess == "clamp" && l.MaxOutputTokens > 0 && l.MaxOutputTokens/max(1, r.Choices) == 0 {
			// More choices than the cap has tokens: no maximum fits.
			return ReasonMaxTokensExceeded
		}
		if l.Excess != "clamp" {
			if r.HasMax && l.MaxOutputTokens > 0 && r.Reserve() > l.MaxOutputTokens {
				return ReasonMaxTokensExceeded
			}
			if !r.HasMax && (l.MaxOutputTokens > 0 || l.Budget != nil) {
				return ReasonMaxTokensExceeded
			}
		}
	}
	return ""
}

// bodyRefusal is the refusal the request keys o (a view's) give the
// request's body, or "". A view deciding on bodies refuses a request with
// a body that was not read (a reload between reading and deciding made it
// so): never decided unseen.
func (f *URLFacts) bodyRefusal(o *RuleOptions) Reason {
	if o == nil || (o.MCP == nil && o.LLM == nil) || !f.HasBody {
		return ""
	}
	if f.Body == nil {
		return ReasonBodyUnparseable
	}
	return bodyVerdict(o, f.Body)
}

// bodyReasons are the refusals a view's body conditions give.
var bodyReasons = []Reason{ReasonBodyUnparseable, ReasonMCPToolDenied, ReasonMCPMethodDenied, ReasonModelDenied, ReasonMaxTokensExceeded}

// setBodyDenials builds, for each view deciding on bodies, the view that
// replaces it when the body is refused: the same matching keys, the
// refusal as its decision.
func (x *viewIndex) setBodyDenials() {
	x.bodyDenied = make([]map[Reason]*ast.Term, len(x.views))
	for v, o := range x.opts {
		if o == nil || (o.MCP == nil && o.LLM == nil) {
			continue
		}
		obj := x.views[v].Value.(ast.Object)
		id := obj.Get(ast.StringTerm("id"))
		x.bodyDenied[v] = map[Reason]*ast.Term{}
		for _, reason := range bodyReasons {
			d := obj.Copy()
			d.Insert(ast.StringTerm("decision"), ast.ObjectTerm(
				ast.Item(ast.StringTerm("allow"), ast.BooleanTerm(false)),
				ast.Item(ast.StringTerm("reason"), ast.StringTerm(reason.String())),
				ast.Item(ast.StringTerm("rule"), id),
			))
			x.bodyDenied[v][reason] = ast.NewTerm(d)
		}
	}
}

// needBody is what the views that may decide f need of its body.
func (x *viewIndex) needBody(f *URLFacts) BodyNeed {
	var n BodyNeed
	if !f.HasBody {
		return n
	}
	var stack [16]int
	for _, v := range x.lookup(stack[:0], f.Host, f.IP.IsValid()) {
		o := x.opts[v]
		if o == nil || o.MaxBodyBytes == 0 || !slices.Contains(o.ports, int(f.Port)) || !x.pathMatches(v, f.PathDecoded) {
			continue
		}
		n.Max = max(n.Max, o.MaxBodyBytes)
		n.JSON = true
		n.MCP = n.MCP || o.MCP != nil
		if o.LLM != nil {
			n.LLM = o.LLM.API
		}
	}
	return n
}

// scopeSet is where the bundle's own Rego rules may decide on a body
// (bodyScopes): hosts with their ports (0: any), or every request.
type scopeSet struct {
	any   bool
	hosts map[string][]int
}

func newScopeSet(scopes []BodyScope, anyHost bool) scopeSet {
	s := scopeSet{any: anyHost, hosts: map[string][]int{}}
	for _, sc := range scopes {
		s.hosts[sc.Host] = append(s.hosts[sc.Host], sc.Port)
	}
	return s
}

func (s scopeSet) covers(host string, port uint16) bool {
	if s.any {
		return true
	}
	for _, p := range s.hosts[host] {
		if p == 0 || p == int(port) {
			return true
		}
	}
	return false
}

// refusal is what the rule's "mcp" key says of one call: "" when it
// passes. A client's answer to a request of the server passes.
func (m *MCPRule) refusal(c *mcp.Call) Reason {
	switch {
	case c.Response:
		return ""
	case !mcp.MethodPasses(c.Method):
		return ReasonMCPMethodDenied
	case c.Method == "tools/call" && !mcp.ToolMatches(m.Tools, c.Tool):
		return ReasonMCPToolDenied
	}
	return ""
}

// Refusals are the calls of r the rule's "mcp" key refuses, by index, so
// that the agent is told which call of a batch was refused and why.
func (m *MCPRule) Refusals(r *mcp.Request) map[int]Reason {
	var out map[int]Reason
	for i := range r.Calls {
		if reason := m.refusal(&r.Calls[i]); reason != "" {
			if out == nil {
				out = map[int]Reason{}
			}
			out[i] = reason
		}
	}
	return out
}

// MarshalJSON prints the facts as `egressd check` shows them: the body's
// size and JSON, and what Rego sees as input.mcp and input.llm.
func (b *BodyFacts) MarshalJSON() ([]byte, error) {
	out := map[string]any{"size": b.Size}
	add := func(key string, v ast.Value) error {
		j, err := ast.JSON(v)
		if err != nil {
			return fmt.Errorf("body facts %s: %w", key, err)
		}
		out[key] = j
		return nil
	}
	if b.JSON != nil {
		if err := add("json", b.JSON); err != nil {
			return nil, err
		}
	}
	if b.MCP != nil {
		if err := add("mcp", b.MCP.Term().Value); err != nil {
			return nil, err
		}
	}
	if b.LLM != nil {
		if err := add("llm", b.LLM.Term().Value); err != nil {
			return nil, err
		}
	}
	return json.Marshal(out)
}
