// Package mcptest runs an MCP server of the official Go SDK for tests of
// the MCP tool plane: three tools (search_docs, ticket.create and
// delete_repo), each recording that it ran and with what arguments, served
// over every transport an agent may use. The record is the witness that a
// refused call never reached the server.
package mcptest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The tools the server offers.
const (
	ToolSearch = "search_docs"
	ToolTicket = "ticket.create"
	ToolDelete = "delete_repo"
)

// The paths the server answers on.
const (
	// PathStreamable serves the Streamable HTTP transport, answering POSTs
	// with event streams (the SDK's default).
	PathStreamable = "/mcp"
	// PathStreamableJSON serves the Streamable HTTP transport, answering
	// POSTs with application/json.
	PathStreamableJSON = "/mcp-json"
	// PathStateless serves the Streamable HTTP transport without sessions
	// (Stateless), where the SDK's client speaks protocol 2026-07-28
	// (server/discover, no GET stream) when the server takes it.
	PathStateless = "/mcp-stateless"
	// PathSSE serves the older HTTP+SSE transport (protocol 2024-11-05):
	// a GET stream whose first event names the URL to POST to.
	PathSSE = "/sse"
)

// SearchArgs are search_docs's arguments.
type SearchArgs struct {
	Query string `json:"query"`
}

// TicketArgs are ticket.create's arguments.
type TicketArgs struct {
	Capability string `json:"capability"`
	Title      string `json:"title"`
}

// DeleteArgs are delete_repo's arguments.
type DeleteArgs struct {
	Repo string `json:"repo"`
}

// Call is one run of a tool.
type Call struct {
	Tool string
	// Args is the arguments as the tool received them: SearchArgs,
	// TicketArgs or DeleteArgs.
	Args any
}

// Server is a running MCP server; its Close runs at the test's end.
type Server struct {
	// URL is the server's base URL (http://127.0.0.1:port); append a Path*.
	URL string

	mu    sync.Mutex
	calls []Call
}

// Start serves a new MCP server on loopback until tb ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{}
	hs := httptest.NewServer(s.Handler())
	tb.Cleanup(hs.Close)
	s.URL = hs.URL
	return s
}

// Handler serves one SDK server (MCPServer) on every transport's path;
// Start serves it on loopback, a test may serve it over TLS.
func (s *Server) Handler() http.Handler {
	srv := s.MCPServer()
	get := func(*http.Request) *mcp.Server { return srv }
	mux := http.NewServeMux()
	// The server stands for a public one: tests reach it by a name (an
	// inspected tunnel's example.com) that its loopback address would
	// otherwise make it refuse as DNS rebinding.
	mux.Handle(PathStreamable, mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{DisableLocalhostProtection: true}))
	mux.Handle(PathStreamableJSON, mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{JSONResponse: true, DisableLocalhostProtection: true}))
	mux.Handle(PathStateless, mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{Stateless: true, DisableLocalhostProtection: true}))
	mux.Handle(PathSSE, mcp.NewSSEHandler(get, &mcp.SSEOptions{DisableLocalhostProtection: true}))
	return mux
}

// MCPServer is a new SDK server whose tools record into s; Start serves
// one, and a test can serve it on its own transport.
func (s *Server) MCPServer() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "mcptest", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: ToolSearch, Description: "search the docs"}, record[SearchArgs](s, ToolSearch))
	mcp.AddTool(srv, &mcp.Tool{Name: ToolTicket, Description: "create a ticket"}, record[TicketArgs](s, ToolTicket))
	mcp.AddTool(srv, &mcp.Tool{Name: ToolDelete, Description: "delete a repository"}, record[DeleteArgs](s, ToolDelete))
	return srv
}

// record is a tool handler that records its call and answers "ran <tool>".
func record[In any](s *Server, tool string) mcp.ToolHandlerFor[In, any] {
	return func(_ context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
		s.mu.Lock()
		s.calls = append(s.calls, Call{Tool: tool, Args: in})
		s.mu.Unlock()
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ran " + tool}}}, nil, nil
	}
}

// Calls returns the tools' runs so far, in order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Ran counts the runs of tool so far.
func (s *Server) Ran(tool string) int {
	n := 0
	for _, c := range s.Calls() {
		if c.Tool == tool {
			n++
		}
	}
	return n
}
