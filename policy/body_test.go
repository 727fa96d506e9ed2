package policy

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// openFloor lets every address through: these tests decide names.
type openFloor struct{}

func (openFloor) Check(netip.Addr, uint16) error { return nil }

// untouchable fails a test that reads it: a body no rule decides on must
// stream, never be read before the decision.
type untouchable struct{ t *testing.T }

func (u untouchable) Read([]byte) (int, error) {
	u.t.Error("the body was read, but no rule decides on it")
	return 0, io.EOF
}

const bodyRules = `{"rules": [
	{"id": "tools", "hosts": ["mcp.test"], "ports": [443], "inspect": true, "methods": ["GET", "POST", "DELETE"], "paths": ["/mcp"],
	 "mcp": {"tools": ["search_*", "ticket.create"]}},
	{"id": "model", "hosts": ["model.test"], "ports": [443], "inspect": true,
	 "llm": {"api": "openai", "models": ["gpt-4o*"], "max_output_tokens": 100}},
	{"id": "clamped", "hosts": ["clamp.test"], "ports": [443], "inspect": true, "max_body_bytes": 200,
	 "llm": {"api": "anthropic", "models": ["claude-*"], "max_output_tokens": 50, "excess": "clamp"}},
	{"id": "files", "hosts": ["files.test"], "ports": [443], "inspect": true},
	{"id": "ticket-sim", "hosts": ["mcp.test"], "ports": [8443], "inspect": true, "mcp": {"tools": ["*"]}}
]}`

// bodyModule is an operator's own body rule: ticket.create only as a
// simulation, on the one host its rule names.
const bodyModule = `package egress.body

deny contains {"reason": "ticket_not_simulated", "rule": "ticket-sim"} if {
	input.host == "mcp.test"
	input.port == 8443
	input.mcp.tool == "ticket.create"
	input.mcp.arguments.capability != "simulate"
}
`

func bodyEngine(t *testing.T) *PreDial {
	t.Helper()
	dir := modulesWithData(t, bodyRules)
	if err := os.WriteFile(filepath.Join(dir, "body.rego"), []byte(bodyModule), 0o644); err != nil {
		t.Fatal(err)
	}
	return &PreDial{Engine: newTestEngine(t, Config{Dir: dir}), Floor: openFloor{}}
}

func gzipped(s string) string {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write([]byte(s))
	w.Close()
	return b.String()
}

func mcpCall(id int, tool, args string) string {
	return `{"jsonrpc": "2.0", "id": ` + string(rune('0'+id)) + `, "method": "tools/call", "params": {"name": "` + tool + `", "arguments": ` + args + `}}`
}

// TestBodyConditions: a rule's mcp and llm keys (and the bundle's own
// egress.body rules) decide on the body, read within its bound, parsed
// strictly; a refused body names the rule; requests no body rule reaches
// are decided on their request line without their body being read.
func TestBodyConditions(t *testing.T) {
	d := bodyEngine(t)
	tests := []struct {
		name, method, url, ctype, enc, body string
		want                                Reason
		wantRule                            string
	}{
		{"allowed tool", "POST", "https://mcp.test/mcp", "application/json", "", mcpCall(1, "search_docs", `{"q": "x"}`), ReasonAllowed, "tools"},
		{"unlisted tool", "POST", "https://mcp.test/mcp", "application/json", "", mcpCall(1, "delete_repo", `{}`), ReasonMCPToolDenied, "tools"},
		{"unlisted tool in a batch", "POST", "https://mcp.test/mcp", "application/json", "", "[" + mcpCall(1, "search_a", `{}`) + "," + mcpCall(2, "delete_repo", `{}`) + "]", ReasonMCPToolDenied, "tools"},
		{"tools/list passes", "POST", "https://mcp.test/mcp", "application/json", "", `{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}`, ReasonAllowed, "tools"},
		{"resources/read refused", "POST", "https://mcp.test/mcp", "application/json", "", `{"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": "file:///etc/passwd"}}`, ReasonMCPMethodDenied, "tools"},
		{"duplicate key", "POST", "https://mcp.test/mcp", "application/json", "", `{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "method": "tools/call"}`, ReasonBodyUnparseable, ""},
		{"not JSON-RPC", "POST", "https://mcp.test/mcp", "application/json", "", `{"hello": 1}`, ReasonBodyUnparseable, ""},
		{"gzip body decided decompressed", "POST", "https://mcp.test/mcp", "application/json", "gzip", gzipped(mcpCall(1, "delete_repo", `{}`)), ReasonMCPToolDenied, "tools"},
		{"unknown coding", "POST", "https://mcp.test/mcp", "application/json", "br", "xx", ReasonBodyUnparseable, ""},
		{"Rego rule: simulated ticket", "POST", "https://mcp.test:8443/mcp", "application/json", "", mcpCall(1, "ticket.create", `{"capability": "simulate"}`), ReasonAllowed, "ticket-sim"},
		{"Rego rule: real ticket", "POST", "https://mcp.test:8443/mcp", "application/json", "", mcpCall(1, "ticket.create", `{"capability": "write"}`), "ticket_not_simulated", "ticket-sim"},
		{"Rego rule: real ticket in a batch", "POST", "https://mcp.test:8443/mcp", "application/json", "", "[" + mcpCall(1, "search_a", `{}`) + "," + mcpCall(2, "ticket.create", `{"capability": "write"}`) + "]", "ticket_not_simulated", "ticket-sim"},
		{"Rego rule: simulated batch", "POST", "https://mcp.test:8443/mcp", "application/json", "", "[" + mcpCall(1, "search_a", `{}`) + "," + mcpCall(2, "ticket.create", `{"capability": "simulate"}`) + "]", ReasonAllowed, "ticket-sim"},
		{"model listed", "POST", "https://model.test/v1/chat/completions", "application/json", "", `{"model": "gpt-4o-mini", "max_completion_tokens": 100, "messages": []}`, ReasonAllowed, "model"},
		{"model not listed", "POST", "https://model.test/v1/chat/completions", "application/json", "", `{"model": "o3", "max_completion_tokens": 10, "messages": []}`, ReasonModelDenied, "model"},
		{"too many tokens", "POST", "https://model.test/v1/chat/completions", "application/json", "", `{"model": "gpt-4o", "max_completion_tokens": 101, "messages": []}`, ReasonMaxTokensExceeded, "model"},
		{"no maximum under a cap", "POST", "https://model.test/v1/chat/completions", "application/json", "", `{"model": "gpt-4o", "messages": []}`, ReasonMaxTokensExceeded, "model"},
		{"clamped, not refused", "POST", "https://clamp.test/v1/messages", "application/json", "", `{"model": "claude-x", "max_tokens": 4096, "messages": []}`, ReasonAllowed, "clamped"},
		{"over max_body_bytes", "POST", "https://clamp.test/v1/messages", "application/json", "", `{"model": "claude-x", "max_tokens": 5, "messages": [` + strings.Repeat(`"x",`, 60) + `"x"]}`, ReasonBodyTooLarge, ""},
		{"gzip bomb", "POST", "https://clamp.test/v1/messages", "application/json", "gzip", gzipped(`{"model": "claude-x", "max_tokens": 5, "pad": "` + strings.Repeat("x", 10000) + `"}`), ReasonBodyTooLarge, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := strings.TrimPrefix(tt.url, "https://")
			host, path, _ := strings.Cut(u, "/")
			if !strings.Contains(host, ":") {
				host += ":443"
			}
			out := d.DecideInspected(context.Background(), Identity{}, host, HTTPRequest{
				Method: tt.method, Target: "/" + path, HostHeader: host,
				Body: strings.NewReader(tt.body), ContentType: tt.ctype, ContentEncoding: tt.enc,
			})
			if got := out.Decision.Reason; got != tt.want || (tt.wantRule != "" && out.Decision.Rule != tt.wantRule) {
				t.Errorf("decision %+v (err %v); want %s by rule %q", out.Decision, out.Err, tt.want, tt.wantRule)
			}
			if (tt.want == ReasonAllowed) != out.Decision.Allow {
				t.Errorf("allow = %v, want %v", out.Decision.Allow, tt.want == ReasonAllowed)
			}
		})
	}
	t.Run("no body rule reads no body", func(t *testing.T) {
		for _, target := range []string{"files.test:443", "model.test:443"} {
			path := "/upload"
			if target == "model.test:443" {
				// A GET of a model rule carries no call: not read.
				path = "/v1/models"
			}
			method := "POST"
			if path == "/v1/models" {
				method = "GET"
			}
			req := HTTPRequest{Method: method, Target: path, HostHeader: target, ContentType: "application/json"}
			if method == "POST" {
				req.Body = untouchable{t}
			}
			if out := d.DecideInspected(context.Background(), Identity{}, target, req); !out.Decision.Allow {
				t.Errorf("%s %s%s = %+v; want allowed on its request line", method, target, path, out.Decision)
			}
		}
	})
	t.Run("an MCP GET stream passes", func(t *testing.T) {
		out := d.DecideInspected(context.Background(), Identity{}, "mcp.test:443", HTTPRequest{Method: "GET", Target: "/mcp", HostHeader: "mcp.test:443"})
		if !out.Decision.Allow {
			t.Errorf("GET /mcp = %+v; want allowed (the transport's event stream)", out.Decision)
		}
	})
}
