package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/mcptest"
)

// simulateOnly is an operator's own body rule: ticket.create only as a
// simulation.
const simulateOnly = `package egress.body

deny contains {"reason": "ticket_not_simulated", "rule": "tools"} if {
	input.host == "example.com"
	input.mcp.tool == "ticket.create"
	input.mcp.arguments.capability != "simulate"
}
`

// TestMCPToolPlane drives the official MCP Go SDK's client and server
// through the binary, over Streamable HTTP in an inspected tunnel (event
// stream and JSON answers) and the older HTTP+SSE transport: the client is offered only the allowed tools,
// an allowed call runs, an unlisted tool and a ticket that is not a
// simulation fail with a JSON-RPC error naming the reason and never reach
// the server, and every call is recorded with its tool, id and a keyed
// digest of its arguments, never the arguments.
func TestMCPToolPlane(t *testing.T) {
	srv := &mcptest.Server{}
	up := StartTLSHandler(t, srv.Handler(), true)
	in := newInspecting(t, up)
	pol := WritePolicy(t, []Rule{{ID: "tools", Hosts: []string{"example.com"}, Ports: []int{up.Port}, Inspect: true,
		MCP: map[string]any{"tools": []string{"search_*", "ticket.create"}}}})
	if err := os.WriteFile(filepath.Join(pol, "body.rego"), []byte(simulateOnly), 0o644); err != nil {
		t.Fatal(err)
	}
	roots := exportedRoots(t, in.CADir, "--identity", "anonymous")
	e := Start(t, Options{YAML: in.YAML, PolicyDir: pol, DNS: in.DNS.Addr()})
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(e.ProxyURL("", "")), TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}}

	for _, path := range []string{mcptest.PathStreamable, mcptest.PathStreamableJSON, mcptest.PathSSE} {
		t.Run(strings.TrimPrefix(path, "/"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
			endpoint := "https://example.com:" + strconv.Itoa(up.Port) + path
			var tr mcp.Transport = &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}
			if path == mcptest.PathSSE {
				// The older HTTP+SSE transport: answers, refusals
				// included, come on the session's GET stream.
				tr = &mcp.SSEClientTransport{Endpoint: endpoint, HTTPClient: hc}
			}
			cs, err := client.Connect(ctx, tr, nil)
			if err != nil {
				t.Fatalf("connect through egressd: %v", err)
			}
			defer cs.Close()
			list, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatalf("tools/list: %v", err)
			}
			var names []string
			for _, tool := range list.Tools {
				names = append(names, tool.Name)
			}
			slices.Sort(names)
			if want := []string{mcptest.ToolSearch, mcptest.ToolTicket}; !slices.Equal(names, want) {
				t.Errorf("tools offered = %v; want only %v", names, want)
			}
			before := srv.Ran(mcptest.ToolSearch)
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcptest.ToolSearch, Arguments: map[string]any{"query": "q-7f3a9c"}})
			if err != nil || res.IsError || srv.Ran(mcptest.ToolSearch) != before+1 {
				t.Errorf("allowed call: %+v, %v (ran %d times)", res, err, srv.Ran(mcptest.ToolSearch)-before)
			}
			for _, c := range []struct {
				tool, reason string
				args         map[string]any
			}{
				{mcptest.ToolDelete, "mcp_tool_denied", map[string]any{"repo": "prod-repo-91b2"}},
				{mcptest.ToolTicket, "ticket_not_simulated", map[string]any{"capability": "write", "title": "t"}},
			} {
				ran := srv.Ran(c.tool)
				_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
				if err == nil || !strings.Contains(err.Error(), c.reason) {
					t.Errorf("call of %s: err = %v; want a JSON-RPC error naming %s", c.tool, err, c.reason)
				}
				// The SDK's own error type carries error.data: what the
				// agent can do (nothing: the rule's own refusal is no
				// grant's to lift) and the request id.
				var werr *jsonrpc.Error
				var data struct{ Reason, Class, Action, Request string }
				if !errors.As(err, &werr) || json.Unmarshal(werr.Data, &data) != nil ||
					data.Reason != c.reason || data.Action != "none" || data.Class != "policy" || data.Request == "" {
					t.Errorf("call of %s: error data %+v; want reason, class policy, action none and a request id", c.tool, data)
				}
				if n := srv.Ran(c.tool) - ran; n != 0 {
					t.Errorf("%s reached the server %d times", c.tool, n)
				}
			}
			res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: mcptest.ToolTicket, Arguments: map[string]any{"capability": "simulate", "title": "t"}})
			if err != nil || res.IsError {
				t.Errorf("simulated ticket: %+v, %v", res, err)
			}
		})
	}
	denied := e.WaitRecords(t, "of the refused tool call", func(r audit.Record) bool {
		return r.Kind == audit.KindHTTP && r.Reason == "mcp_tool_denied"
	})
	for _, r := range denied {
		if r.Tool != mcptest.ToolDelete || r.MCPMethod != "tools/call" || r.RPCID == "" || len(r.ArgsHMAC) != 64 || r.Rule != "tools" {
			t.Errorf("refusal record %+v; want tool, method, id, a 64-hex-digit argument digest and the rule", r)
		}
	}
	allowed := e.WaitRecords(t, "of the allowed search", func(r audit.Record) bool {
		return r.Kind == audit.KindHTTP && r.Tool == mcptest.ToolSearch && r.Decision == audit.DecisionAllow
	})
	if len(allowed) != 3 || allowed[0].ArgsHMAC != allowed[1].ArgsHMAC || allowed[0].ArgsHMAC != allowed[2].ArgsHMAC {
		t.Errorf("allowed search records %+v; want three, with equal argument digests (equal arguments)", allowed)
	}
	if err := e.Stop(10 * time.Second); err != nil {
		t.Logf("stop: %v", err)
	}
	VerifyAudit(t, e)
	assertNoSecretAnywhere(t, []string{e.Log()}, []string{e.AuditDir}, "q-7f3a9c", "prod-repo-91b2")
}
