package mcp

import (
	"strings"
	"testing"
	"time"
)

func TestMethodPasses(t *testing.T) {
	for _, tt := range []struct {
		method string
		want   bool
	}{
		{"initialize", true}, {"server/discover", true}, {"ping", true},
		{"notifications/initialized", true}, {"notifications/cancelled", true},
		{"tools/list", true}, {"tools/call", true}, {"subscriptions/listen", true},
		{"resources/list", false}, {"resources/read", false}, {"prompts/get", false},
		{"completion/complete", false}, {"logging/setLevel", false},
		{"notifications", false}, {"Tools/call", false}, {"", false}, {"tools/call ", false},
	} {
		if got := MethodPasses(tt.method); got != tt.want {
			t.Errorf("MethodPasses(%q) = %v; want %v", tt.method, got, tt.want)
		}
	}
}

func TestToolMatches(t *testing.T) {
	for _, tt := range []struct {
		globs []string
		tool  string
		want  bool
	}{
		{[]string{"search_*"}, "search_docs", true},
		{[]string{"search_*"}, "search_", true},
		{[]string{"search_*"}, "xsearch_docs", false},
		{[]string{"ticket.create"}, "ticket.create", true},
		{[]string{"ticket.create"}, "ticketxcreate", false},
		{[]string{"ticket.create"}, "ticket.create2", false},
		{[]string{"*"}, "a/b.c", true},
		{[]string{"a*b*c"}, "a/x.b/y.c", true},
		{[]string{"a*b*c"}, "abcb", false},
		{[]string{"*.create"}, "ticket.create", true},
		{[]string{"**"}, "", true},
		{[]string{"a?"}, "ab", false},
		{[]string{"a[b]"}, "ab", false},
		{[]string{"a[b]"}, "a[b]", true},
		{[]string{"x", "search_*"}, "search_docs", true},
		{nil, "search_docs", false},
		{[]string{"ünï*"}, "ünïcode", true},
	} {
		if got := ToolMatches(tt.globs, tt.tool); got != tt.want {
			t.Errorf("ToolMatches(%q, %q) = %v; want %v", tt.globs, tt.tool, got, tt.want)
		}
	}
}

// TestToolMatchesLinear: the pattern that makes a backtracking matcher
// exponential stays fast.
func TestToolMatchesLinear(t *testing.T) {
	glob := strings.Repeat("a*", 60) + "b"
	name := strings.Repeat("a", 4096)
	start := time.Now()
	if ToolMatches([]string{glob}, name) {
		t.Fatalf("ToolMatches(a*…b, a…) = true; want false")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("ToolMatches took %v", d)
	}
}
