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
}

// batchRefusedReason is error.data.reason of a call of a refused batch that
// was not itself refused: nothing of the batch was sent.
const batchRefusedReason = "mcp_batch_refused"

// ErrorBody is the answer to a request the proxy refuses (refused maps a
// call's index in req.Calls to its refusal; every call of a batch is
// answered, and the batch is refused whole when any call is), and the
// HTTP status to send it with, as Content-Type application/json.
//
// When some call has an id, the body is a JSON-RPC error response to each
// call with an id (an array for a batch, in the calls' order) and status
// is 200, as the Streamable HTTP transport answers a POST: error.code is
// CodeRefused, error.message says what was refused, and error.data is
// {"reason": reason, "tool": tool} ("tool" for a tools/call). A call of a
// refused batch that was not itself refused is answered with reason
// "mcp_batch_refused" (not a policy reason: the batch was refused for
// another call), since none of it reached the server.
//
// When no call has an id (notifications and client responses only) there
// is nothing JSON-RPC can answer: the body is one error response with id
// null (JSON-RPC's form for an error that belongs to no request) naming
// the first refused call's reason, and status is 403. The Go SDK's client
// gives the caller an error for a non-2xx answer to a notification and
// then closes its session; that is the price of telling the agent.
//
// Over the older HTTP+SSE transport, answers travel on the GET stream, not
// in the POST's body: the proxy answers the POST 202 Accepted and hands
// the body to the session's Stream.Inject.
func ErrorBody(req *Request, refused map[int]Refusal) (body []byte, status int) {
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
		r, ok := refused[i]
		if !ok {
			r = Refusal{Reason: batchRefusedReason, Message: "refused by egressd: another call of its batch was refused, so none was sent"}
		}
		if answered > 0 {
			b.WriteByte(',')
		}
		writeError(&b, c.ID, c, r)
		answered++
	}
	if req.Batch {
		b.WriteByte(']')
	}
	if answered > 0 {
		return b.Bytes(), http.StatusOK
	}
	b.Reset()
	for i := range req.Calls {
		if r, ok := refused[i]; ok {
			writeError(&b, "null", &req.Calls[i], r)
			return b.Bytes(), http.StatusForbidden
		}
	}
	writeError(&b, "null", &Call{}, Refusal{Reason: batchRefusedReason, Message: "refused by egressd"})
	return b.Bytes(), http.StatusForbidden
}

// writeError appends one JSON-RPC error response for call c.
func writeError(b *bytes.Buffer, id string, c *Call, r Refusal) {
	msg := r.Message
	if msg == "" {
		msg = defaultMessage(c, r.Reason)
	}
	b.WriteString(`{"jsonrpc":"2.0","id":`)
	b.WriteString(id)
	b.WriteString(`,"error":{"code":`)
	b.WriteString(strconv.Itoa(CodeRefused))
	b.WriteString(`,"message":`)
	b.WriteString(jsonString(msg))
	b.WriteString(`,"data":{"reason":`)
	b.WriteString(jsonString(r.Reason))
	if c.Method == MethodToolsCall {
		b.WriteString(`,"tool":`)
		b.WriteString(jsonString(c.Tool))
	}
	b.WriteString(`}}}`)
}

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
