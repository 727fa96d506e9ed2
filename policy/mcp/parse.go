// Package mcp owns egressd's knowledge of the Model Context Protocol's
// JSON-RPC messages: what an agent's POST to an MCP server asks for (Parse,
// and the facts Rego sees as input.mcp), which methods and tools pass
// (MethodPasses, ToolMatches), the JSON-RPC error an agent reads when a
// call is refused (ErrorBody), and the server's tools/list answers filtered
// to the allowed tools, as JSON (FilterJSON) or as a server-sent event
// stream (FilterSSE, Stream).
//
// It knows both transports of the specification: Streamable HTTP (JSON-RPC
// POSTs, single or batched, answered with JSON or an event stream; GET
// streams) and the older HTTP+SSE transport (every answer arrives on one
// GET event stream, the POSTs are only acknowledged).
//
// The package decides nothing itself and imports neither policy nor proxy:
// policy imports it, and the proxy acts on its answers.
package mcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// ErrMalformed is wrapped by every error of Parse: the body is not an MCP
// JSON-RPC message egressd can decide on (the proxy answers it
// body_unparseable).
var ErrMalformed = errors.New("malformed MCP JSON-RPC message")

// MaxToolName bounds a tool name in bytes, the specification's limit (1 to
// 128 characters; bytes here, which is stricter for non-ASCII names). Parse
// refuses a tools/call naming a longer one, and the filters drop a longer
// one from tools/list answers, so the agent is never offered a tool it
// could not call.
const MaxToolName = 128

// Method names this package treats specially.
const (
	MethodInitialize = "initialize"
	MethodPing       = "ping"
	MethodToolsList  = "tools/list"
	MethodToolsCall  = "tools/call"
	// MethodDiscover is the stateless handshake of protocol 2026-07-28
	// (SEP-2575), which the official Go SDK's client (v1.8.0) sends before
	// falling back to initialize.
	MethodDiscover = "server/discover"
	// MethodSubscriptionsListen opens the stream of the server's
	// notifications in protocol 2026-07-28: the stateless successor of the
	// GET stream, which carries no call.
	MethodSubscriptionsListen = "subscriptions/listen"
	// notificationPrefix starts every notification method.
	notificationPrefix = "notifications/"
)

// Call is one JSON-RPC message of a request body: a request (ID set), a
// notification (ID empty), or the client's response to a request of the
// server (Response set; sampling, elicitation and roots are asked by the
// server and answered by the client in a POST of its own).
type Call struct {
	// Method is the JSON-RPC method; empty for a response.
	Method string
	// Tool is params.name of a tools/call (1 to MaxToolName bytes); empty
	// for every other method.
	Tool string
	// ID is the JSON text of the id (`7`, `"a"`, `null`) as the answer
	// must repeat it; empty for a notification. A string id is the JSON
	// encoding of its value, which may differ in escapes from the bytes
	// sent but is the same JSON value.
	ID string
	// Arguments is params.arguments of a tools/call, an object; nil when
	// absent or null (a server reads both as no arguments).
	Arguments ast.Value
	// Response marks a client's JSON-RPC response (result or error) to a
	// request of the server. Method and Tool are empty.
	Response bool

	// id is the id as parsed, for Term; nil for a notification.
	id ast.Value
}

// Request is a parsed request body: one message, or a batch.
type Request struct {
	// Calls holds the messages in the body's order: one unless Batch.
	Calls []Call
	// Batch is set when the body is a JSON array (a JSON-RPC batch), even
	// of one message: its answer is an array too.
	Batch bool
}

// Parse reads a request body, already parsed (strictly: no duplicate keys)
// into an OPA value, as a JSON-RPC 2.0 request, notification, response or
// a non-empty batch of them. Anything else is an error wrapping
// ErrMalformed: a jsonrpc other than "2.0", a method that is not a
// string, an id that is not a string, number or null, params that are
// not an object or array, a tools/call without a params.name string of 1
// to MaxToolName bytes or with arguments that are not an object, a
// message with both a method and a result or error, or one with neither.
func Parse(v ast.Value) (*Request, error) {
	switch v := v.(type) {
	case ast.Object:
		c, err := parseMessage(v)
		if err != nil {
			return nil, err
		}
		return &Request{Calls: []Call{c}}, nil
	case *ast.Array:
		if v.Len() == 0 {
			return nil, fmt.Errorf("%w: empty batch", ErrMalformed)
		}
		r := &Request{Calls: make([]Call, 0, v.Len()), Batch: true}
		for i := range v.Len() {
			o, ok := v.Elem(i).Value.(ast.Object)
			if !ok {
				return nil, fmt.Errorf("%w: batch element %d is not an object", ErrMalformed, i)
			}
			c, err := parseMessage(o)
			if err != nil {
				return nil, fmt.Errorf("batch element %d: %w", i, err)
			}
			r.Calls = append(r.Calls, c)
		}
		return r, nil
	default:
		return nil, fmt.Errorf("%w: not a JSON object or array", ErrMalformed)
	}
}

func parseMessage(o ast.Object) (Call, error) {
	var c Call
	if s, ok := member(o, "jsonrpc").(ast.String); !ok || s != "2.0" {
		return c, fmt.Errorf("%w: jsonrpc is not \"2.0\"", ErrMalformed)
	}
	if idv := member(o, "id"); idv != nil {
		text, err := idText(idv)
		if err != nil {
			return c, err
		}
		c.ID, c.id = text, idv
	}
	mv := member(o, "method")
	hasResult := member(o, "result") != nil || member(o, "error") != nil
	if mv == nil {
		if !hasResult {
			return c, fmt.Errorf("%w: neither a method nor a result or error", ErrMalformed)
		}
		if c.id == nil {
			return c, fmt.Errorf("%w: a response without an id", ErrMalformed)
		}
		c.Response = true
		return c, nil
	}
	if hasResult {
		return c, fmt.Errorf("%w: both a method and a result or error", ErrMalformed)
	}
	m, ok := mv.(ast.String)
	if !ok {
		return c, fmt.Errorf("%w: method is not a string", ErrMalformed)
	}
	c.Method = string(m)
	params := member(o, "params")
	switch params.(type) {
	case nil, ast.Object, *ast.Array:
	default:
		return c, fmt.Errorf("%w: %s params are not an object or array", ErrMalformed, c.Method)
	}
	if c.Method != MethodToolsCall {
		return c, nil
	}
	po, ok := params.(ast.Object)
	if !ok {
		return c, fmt.Errorf("%w: tools/call params are not an object", ErrMalformed)
	}
	name, ok := member(po, "name").(ast.String)
	if !ok {
		return c, fmt.Errorf("%w: tools/call params.name is not a string", ErrMalformed)
	}
	if len(name) == 0 || len(name) > MaxToolName {
		return c, fmt.Errorf("%w: tools/call params.name is %d bytes, want 1 to %d", ErrMalformed, len(name), MaxToolName)
	}
	c.Tool = string(name)
	switch args := member(po, "arguments").(type) {
	case nil, ast.Null:
	case ast.Object:
		c.Arguments = args
	default:
		return c, fmt.Errorf("%w: tools/call params.arguments is not an object", ErrMalformed)
	}
	return c, nil
}

// member is o's value at key, nil when absent.
func member(o ast.Object, key string) ast.Value {
	t := o.Get(ast.InternedTerm(key))
	if t == nil {
		return nil
	}
	return t.Value
}

// idText is the JSON text of a JSON-RPC id.
func idText(v ast.Value) (string, error) {
	switch v := v.(type) {
	case ast.String:
		return jsonString(string(v)), nil
	case ast.Number:
		// The number's text as sent (json.Number): the answer must carry
		// the same value, and the text is already valid JSON.
		return string(v), nil
	case ast.Null:
		return "null", nil
	default:
		return "", fmt.Errorf("%w: id is not a string, number or null", ErrMalformed)
	}
}

// jsonString is s as a JSON string, without HTML escapes (they are valid
// but make refusals harder to read).
func jsonString(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		// A Go string always encodes (invalid UTF-8 becomes U+FFFD).
		panic(fmt.Sprintf("encode JSON string: %v", err))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// Term is what Rego sees as input.mcp for the whole body. A single message
// is its CallTerm. A batch is {"batch": true, "calls": [CallTerm(0), …]}.
//
// A batch must not be decided as a whole by rules written for one call (a
// rule refusing input.mcp.tool == "delete_repo" is undefined, so silent, on
// the batch shape): the proxy evaluates each call of a batch with its
// CallTerm, which has the single shape, and refuses the batch if any call
// is refused. Term's batch shape is for records and explanations.
func (r *Request) Term() *ast.Term {
	if !r.Batch {
		return r.CallTerm(0)
	}
	calls := make([]*ast.Term, len(r.Calls))
	for i := range r.Calls {
		calls[i] = r.CallTerm(i)
	}
	return ast.ObjectTerm(
		ast.Item(ast.InternedTerm("batch"), ast.InternedTerm(true)),
		ast.Item(ast.InternedTerm("calls"), ast.ArrayTerm(calls...)),
	)
}

// CallTerm is input.mcp for the call at index i: {"method": m} plus "id"
// (the id's JSON value, absent for a notification), "tool" and
// "arguments" (tools/call; arguments absent when the call has none),
// "response": true (a client's response, method ""), and "batch": true
// when the call is one of a batch.
func (r *Request) CallTerm(i int) *ast.Term {
	c := &r.Calls[i]
	items := make([][2]*ast.Term, 0, 5)
	items = append(items, ast.Item(ast.InternedTerm("method"), ast.StringTerm(c.Method)))
	if id := c.idValue(); id != nil {
		items = append(items, ast.Item(ast.InternedTerm("id"), ast.NewTerm(id)))
	}
	if c.Method == MethodToolsCall {
		items = append(items, ast.Item(ast.InternedTerm("tool"), ast.StringTerm(c.Tool)))
		if c.Arguments != nil {
			items = append(items, ast.Item(ast.InternedTerm("arguments"), ast.NewTerm(c.Arguments)))
		}
	}
	if c.Response {
		items = append(items, ast.Item(ast.InternedTerm("response"), ast.InternedTerm(true)))
	}
	if r.Batch {
		items = append(items, ast.Item(ast.InternedTerm("batch"), ast.InternedTerm(true)))
	}
	return ast.ObjectTerm(items...)
}

// idValue is the id as a value: as parsed, or from ID's text for a Call
// built by hand; nil for a notification or a text that is not JSON.
func (c *Call) idValue() ast.Value {
	if c.id != nil || c.ID == "" {
		return c.id
	}
	v, err := ast.ValueFromReader(strings.NewReader(c.ID))
	if err != nil {
		return nil
	}
	return v
}
