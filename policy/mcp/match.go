package mcp

import (
	"strings"

	"github.com/egressd/egressd/policy/wildcard"
)

// MethodPasses reports whether a JSON-RPC method passes an MCP rule
// without more: the handshakes (initialize, and server/discover of protocol
// 2026-07-28), ping, every notifications/* method, tools/list (its answer
// is filtered), tools/call (then decided by its tool), and
// subscriptions/listen (the stream of the server's notifications). Every
// other method (resources/*, prompts/*, completion/*, logging/setLevel,
// and any method unknown today) does not: the proxy refuses it
// mcp_method_denied.
//
// A client's response to a request of the server (Call.Response, method
// "") is not a method: the proxy passes it to Rego like any call.
func MethodPasses(method string) bool {
	switch method {
	case MethodInitialize, MethodDiscover, MethodPing, MethodToolsList, MethodToolsCall, MethodSubscriptionsListen:
		return true
	}
	return strings.HasPrefix(method, notificationPrefix)
}

// ToolMatches reports whether tool matches one of globs, each matched
// against the whole name: "*" matches any run of characters (none, or any
// number, including "." and "/"), every other character only itself
// (package wildcard, which model globs share).
func ToolMatches(globs []string, tool string) bool { return wildcard.Any(globs, tool) }
