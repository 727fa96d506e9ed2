package mcp

import "strings"

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
// number, including "." and "/"), every other character only itself. It
// takes O(len(glob)·len(tool)) at worst per glob (a greedy match that
// backtracks only to the last star), never exponential time.
func ToolMatches(globs []string, tool string) bool {
	for _, g := range globs {
		if globMatch(g, tool) {
			return true
		}
	}
	return false
}

// globMatch is the classic linear wildcard match: on a mismatch after a
// star, the star absorbs one more byte and matching resumes there. Only the
// last star needs revisiting, because any earlier star can absorb whatever
// a later one would have to.
func globMatch(glob, name string) bool {
	gi, ni := 0, 0
	star, mark := -1, 0 // the last star's index in glob; where its run ends in name
	for ni < len(name) {
		switch {
		case gi < len(glob) && glob[gi] == '*':
			star, mark = gi, ni
			gi++
		case gi < len(glob) && glob[gi] == name[ni]:
			gi++
			ni++
		case star >= 0:
			mark++
			gi, ni = star+1, mark
		default:
			return false
		}
	}
	for gi < len(glob) && glob[gi] == '*' {
		gi++
	}
	return gi == len(glob)
}
