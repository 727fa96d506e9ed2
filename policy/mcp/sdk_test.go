package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/mcptest"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// witnessGlobs is the rule of the witness tests:
// "mcp": {"tools": ["search_*", "ticket.create"]}.
var witnessGlobs = []string{"search_*", "ticket.create"}

// filteringProxy is the least a proxy does with this package, standing in
// for egressd's: it parses each POST (encoding/json to an OPA value, then
// Parse), refuses what MethodPasses and ToolMatches refuse with ErrorBody,
// and filters every answer with FilterJSON, FilterSSE or, for the HTTP+SSE
// transport's GET stream, a Stream that carries the refusals.
type filteringProxy struct {
	upstream string

	mu      sync.Mutex
	streams []*Stream // HTTP+SSE sessions' GET streams
	methods []string  // every call's method, as parsed
	answers []string  // every answer's kind: "json", "sse", "stream"
}

func (p *filteringProxy) note(list *[]string, s string) {
	p.mu.Lock()
	*list = append(*list, s)
	p.mu.Unlock()
}

// seen returns the methods and answer kinds so far, and forgets them.
func (p *filteringProxy) seen() (methods, answers []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	methods, answers = p.methods, p.answers
	p.methods, p.answers = nil, nil
	return methods, answers
}

func (p *filteringProxy) allow(tool string) bool { return ToolMatches(witnessGlobs, tool) }

func (p *filteringProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if r.Method == http.MethodPost {
		v, err := decodeValue(body)
		if err != nil {
			http.Error(w, "body_unparseable", http.StatusBadRequest)
			return
		}
		req, err := Parse(v)
		if err != nil {
			http.Error(w, "body_unparseable: "+err.Error(), http.StatusBadRequest)
			return
		}
		for _, c := range req.Calls {
			p.note(&p.methods, c.Method)
		}
		if refused := p.decide(req); len(refused) > 0 {
			p.refuse(w, r, req, refused)
			return
		}
	}
	up, err := http.NewRequestWithContext(r.Context(), r.Method, p.upstream+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	up.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(up)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		if k != "Content-Length" {
			w.Header()[k] = vs
		}
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case ct == "application/json":
		p.note(&p.answers, "json")
		answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err == nil {
			answer, err = FilterJSON(answer, p.allow)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.WriteHeader(resp.StatusCode)
		w.Write(answer)
	case ct == "text/event-stream" && r.URL.Path == mcptest.PathSSE:
		p.note(&p.answers, "stream")
		s := NewStream(resp.Body, p.allow)
		defer s.Close()
		p.mu.Lock()
		p.streams = append(p.streams, s)
		p.mu.Unlock()
		w.WriteHeader(resp.StatusCode)
		copyFlushing(w, s)
	case ct == "text/event-stream":
		p.note(&p.answers, "sse")
		w.WriteHeader(resp.StatusCode)
		copyFlushing(w, FilterSSE(resp.Body, p.allow))
	default:
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	}
}

// decide refuses each call MethodPasses or ToolMatches refuses.
func (p *filteringProxy) decide(req *Request) map[int]Refusal {
	refused := map[int]Refusal{}
	for i, c := range req.Calls {
		switch {
		case c.Response:
		case !MethodPasses(c.Method):
			refused[i] = Refusal{Reason: "mcp_method_denied"}
		case c.Method == MethodToolsCall && !ToolMatches(witnessGlobs, c.Tool):
			refused[i] = Refusal{Reason: "mcp_tool_denied"}
		}
	}
	return refused
}

// refuse answers a refused request: in the POST's answer, or for the
// HTTP+SSE transport on the session's GET stream with the POST accepted.
func (p *filteringProxy) refuse(w http.ResponseWriter, r *http.Request, req *Request, refused map[int]Refusal) {
	body, status := ErrorBody(req, refused)
	if r.URL.Path == mcptest.PathSSE && status == http.StatusOK {
		p.mu.Lock()
		var stream *Stream
		for _, s := range p.streams {
			if s.Endpoint() == r.URL.RequestURI() {
				stream = s
			}
		}
		p.mu.Unlock()
		if stream == nil || stream.Inject(body) != nil {
			http.Error(w, "no stream for the session", http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}

// copyFlushing passes an event stream on as it comes.
func copyFlushing(w http.ResponseWriter, r io.Reader) {
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			rc.Flush()
		}
		if err != nil {
			return
		}
	}
}

// TestSDKThroughFilter connects the official Go SDK's client to its server
// through filteringProxy over each transport: tools/list shows only the
// allowed tools, an allowed call runs, a refused one fails with the
// refusal's JSON-RPC error and never runs (the server's own record is the
// witness), a refused method fails likewise, and the session stays usable.
func TestSDKThroughFilter(t *testing.T) {
	server := mcptest.Start(t)
	fp := &filteringProxy{upstream: server.URL}
	proxy := httptest.NewServer(fp)
	t.Cleanup(proxy.Close)

	transports := []struct {
		name     string
		endpoint string
		sse      bool   // the HTTP+SSE transport
		version  string // the client's protocol version; "" for its latest
		answer   string // the kind of answer the proxy must have filtered
		first    string // the first method the client sends
	}{
		{name: "streamable SSE answers", endpoint: mcptest.PathStreamable, answer: "sse", first: "server/discover"},
		{name: "streamable JSON answers", endpoint: mcptest.PathStreamableJSON, answer: "json", first: "server/discover"},
		{name: "streamable 2025-11-25", endpoint: mcptest.PathStreamable, version: "2025-11-25", answer: "sse", first: "initialize"},
		{name: "streamable stateless 2026-07-28", endpoint: mcptest.PathStateless, answer: "sse", first: "server/discover"},
		{name: "HTTP+SSE", endpoint: mcptest.PathSSE, sse: true, answer: "stream", first: "server/discover"},
	}
	// Straight to the server, the client is offered every tool: what the
	// proxy withholds below, the filter withheld.
	if names := toolNames(t, &mcp.StreamableClientTransport{Endpoint: server.URL + mcptest.PathStreamable}); len(names) != 3 {
		t.Fatalf("ListTools without the proxy = %q; want 3 tools", names)
	}
	for _, tt := range transports {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
			var transport mcp.Transport = &mcp.StreamableClientTransport{Endpoint: proxy.URL + tt.endpoint}
			if tt.sse {
				transport = &mcp.SSEClientTransport{Endpoint: proxy.URL + tt.endpoint}
			}
			cs, err := client.Connect(ctx, transport, &mcp.ClientSessionOptions{ProtocolVersion: tt.version})
			if err != nil {
				t.Fatalf("Connect: %v", err)
			}
			defer cs.Close()

			if names, want := listNames(ctx, t, cs), []string{mcptest.ToolSearch, mcptest.ToolTicket}; !slices.Equal(names, want) {
				t.Errorf("ListTools = %q; want %q", names, want)
			}

			before := server.Ran(mcptest.ToolTicket)
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcptest.ToolTicket,
				Arguments: map[string]any{"capability": "simulate", "title": "t"}})
			if err != nil || res.IsError {
				t.Fatalf("CallTool(%s) = %+v, %v; want a result", mcptest.ToolTicket, res, err)
			}
			calls := server.Calls()
			if got := server.Ran(mcptest.ToolTicket); got != before+1 ||
				calls[len(calls)-1].Args != (mcptest.TicketArgs{Capability: "simulate", Title: "t"}) {
				t.Errorf("%s ran %d times, last with %+v; want %d, with the arguments sent", mcptest.ToolTicket, got, calls[len(calls)-1].Args, before+1)
			}

			_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: mcptest.ToolDelete, Arguments: map[string]any{"repo": "r"}})
			checkRefusal(t, err, "mcp_tool_denied", mcptest.ToolDelete)
			if got := server.Ran(mcptest.ToolDelete); got != 0 {
				t.Errorf("%s ran %d times; want 0", mcptest.ToolDelete, got)
			}

			_, err = cs.ListResources(ctx, nil)
			checkRefusal(t, err, "mcp_method_denied", "")

			// The session is still usable after the refusals.
			if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcptest.ToolSearch, Arguments: map[string]any{"query": "q"}}); err != nil {
				t.Errorf("CallTool(%s) after refusals: %v", mcptest.ToolSearch, err)
			}
			cs.Close()
			methods, answers := fp.seen()
			if len(methods) == 0 || methods[0] != tt.first || !slices.Contains(answers, tt.answer) {
				t.Errorf("the proxy saw methods %q, answers %q; want %s first and a %s answer", methods, answers, tt.first, tt.answer)
			}
		})
	}
}

// toolNames lists the tools a client is offered over transport.
func toolNames(t *testing.T, transport mcp.Transport) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx, transport, nil)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer cs.Close()
	return listNames(ctx, t, cs)
}

// listNames lists the tools cs is offered, sorted.
func listNames(ctx context.Context, t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("ListTools: %v", err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	return names
}

// checkRefusal checks that err is the JSON-RPC error ErrorBody makes, as
// the SDK's client hands it to its caller.
func checkRefusal(t *testing.T, err error, reason, tool string) {
	t.Helper()
	var jerr *jsonrpc.Error
	if !errors.As(err, &jerr) {
		t.Fatalf("error = %v; want a JSON-RPC error", err)
	}
	var data struct {
		Reason string `json:"reason"`
		Tool   string `json:"tool"`
	}
	if jerr.Code != CodeRefused || json.Unmarshal(jerr.Data, &data) != nil || data.Reason != reason || data.Tool != tool {
		t.Errorf("error = code %d, data %s; want code %d, reason %s, tool %q", jerr.Code, jerr.Data, CodeRefused, reason, tool)
	}
}
