package mcp

import (
	"bytes"
	"net/http"
	"strconv"
)

// CodeRefused is the JSON-RPC error code of a call egressd refused. It lies
// in JSON-RPC's implementation-defined server error range (-32000 to
// -32099) and clear of the codes MCP and its SDKs use there (-32000
// connection closed and -32001 request timeout in the TypeScript SDK,
// -32002 resource not found, -32020 to -32022 and -32042 in the
// specification): a client can tell a refusal from the server's own
// errors by it, and by error.data.reason.
const CodeRefused = -32050

// Refusal is why the proxy refused one call of a request.
type Refusal struct {
	// Reason is the egressd reason (mcp_tool_denied, mcp_method_denied, or
	// the reason of the Rego rule that refused), put in error.data.reason.
	Reason string
	// Message is the error message the agent reads. If empty, one is made
	// from Reason and the tool.
	Message string
	// Class, Action and Request, when set, go in error.data as "class",
	// "action" and "request": the reason's class, what the agent can do
	// (policy.Action) and the proxy's request id a grant may name.
	Class, Action, Request string
}

// ErrorBody is the answer to a request the proxy refuses (refused maps a
// call's index in req.Calls to its refusal, and must name one; a batch is refused whole when
// any call is, since none of it may reach the server), and the HTTP
// status to send it with, as Content-Type application/json.
//
// When some call has an id, the body is a JSON-RPC error response to each
// call with an id (an array for a batch, in the calls' order) and status
// is 200, as the Streamable HTTP transport answers a POST: error.code is
// CodeRefused, error.message says what was refused, and error.data is
// {"reason": reason, "tool": tool} ("tool" for a refused tools/call). A
// call of a refused batch that was not itself refused is answered with the
// reason of the batch's first refused call and "batch": true instead of
// a tool, and a message saying that its batch was refused and none of it
// sent.
//
// When no call has an id (notifications and client responses only) there
// is nothing JSON-RPC can answer: the body is one error response with id
// null (JSON-RPC's form for an error that belongs to no request) for the
// first refused call, and status is 403. The Go SDK's client gives the
// caller an error for a non-2xx answer to a notification and then fails
// its session; that is the price of telling the agent at all.
//
// Over the older HTTP+SSE transport, answers travel on the GET stream, not
// in the POST's body: the proxy answers the POST 202 Accepted and hands a
// 200 body to the session's Stream.Inject.
func ErrorBody(req *Request, refused map[int]Refusal) (body []byte, status int) {
	first := -1
	for i := range req.Calls {
		if _, ok := refused[i]; ok {
			first = i
			break
		}
	}
	if first < 0 {
		panic("mcp.ErrorBody: no call of the request is refused")
	}
	var b bytes.Buffer
	answered := 0
	if req.Batch {
		b.WriteByte('[')
	}
	for i := range req.Calls {
		c := &req.Calls[i]
		if c.ID == "" || c.Response {
			continue
		}
		if answered > 0 {
			b.WriteByte(',')
		}
		if r, ok := refused[i]; ok {
			writeError(&b, c.ID, c, r, false)
		} else {
			writeError(&b, c.ID, &req.Calls[first], refused[first], true)
		}
		answered++
	}
	if req.Batch {
		b.WriteByte(']')
	}
	if answered > 0 {
		return b.Bytes(), http.StatusOK
	}
	b.Reset()
	writeError(&b, "null", &req.Calls[first], refused[first], false)
	return b.Bytes(), http.StatusForbidden
}

// writeError appends one JSON-RPC error response with id for the refusal
// r of call c; batch marks the answer to another call of c's batch.
func writeError(b *bytes.Buffer, id string, c *Call, r Refusal, batch bool) {
	msg := r.Message
	if msg == "" || batch {
		msg = defaultMessage(c, r.Reason)
	}
	if batch {
		msg = "refused by egressd: its batch was refused and none of it was sent (" + msg + ")"
	}
	b.WriteString(`{"jsonrpc":"2.0","id":`)
	b.WriteString(id)
	b.WriteString(`,"error":{"code":`)
	b.WriteString(strconv.Itoa(CodeRefused))
	b.WriteString(`,"message":`)
	b.WriteString(jsonString(msg))
	b.WriteString(`,"data":{"reason":`)
	b.WriteString(jsonString(r.Reason))
	for _, kv := range [...][2]string{{"class", r.Class}, {"action", r.Action}, {"request", r.Request}} {
		if kv[1] != "" {
			b.WriteString(`,"` + kv[0] + `":`)
			b.WriteString(jsonString(kv[1]))
		}
	}
	switch {
	case batch:
		b.WriteString(`,"batch":true`)
	case c.Method == MethodToolsCall:
		b.WriteString(`,"tool":`)
		b.WriteString(jsonString(c.Tool))
	}
	b.WriteString(`}}}`)
}

// defaultMessage is the message of a refusal that brings none.
func defaultMessage(c *Call, reason string) string {
	switch {
	case c.Method == MethodToolsCall:
		return "refused by egressd (" + reason + "): tool " + c.Tool + " is not allowed"
	case c.Method != "":
		return "refused by egressd (" + reason + "): method " + c.Method + " is not allowed"
	default:
		return "refused by egressd (" + reason + ")"
	}
}
