package wildcard

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestMatch(t *testing.T) {
	tests := []struct {
		glob, s string
		want    bool
	}{
		{"search_*", "search_docs", true},
		{"search_*", "search_", true},
		{"search_*", "research_docs", false},
		{"ticket.create", "ticket.create", true},
		{"ticket.create", "ticket.created", false},
		{"*", "", true},
		{"*", "a/b.c", true},
		{"gpt-4o*", "gpt-4o-mini", true},
		{"claude-*-4-5", "claude-haiku-4-5", true},
		{"claude-*-4-5", "claude-haiku-4-5-x", false},
		{"a*a", "a", false},
		{"a*a", "aa", true},
		{"*ab*ab", "xabyab", true},
		{"*ab*ab", "abab", true},
		{"*ab*ab", "aab", false},
		{"", "", true},
		{"", "x", false},
	}
	for _, tt := range tests {
		if got := Match(tt.glob, tt.s); got != tt.want {
			t.Errorf("Match(%q, %q) = %v; want %v", tt.glob, tt.s, got, tt.want)
		}
	}
}

// FuzzMatch checks Match against the regular expression of the glob
// (RE2: linear too, but an independent reading of "*").
func FuzzMatch(f *testing.F) {
	f.Add("search_*", "search_docs")
	f.Add("*ab*ab", "xabyab")
	f.Add("a*a", "a")
	f.Fuzz(func(t *testing.T, glob, s string) {
		// Names reach Match from strictly parsed JSON (valid UTF-8), and
		// the oracle's regexp takes nothing else.
		if len(glob) > 64 || len(s) > 256 || !utf8.ValidString(glob) || !utf8.ValidString(s) {
			return
		}
		parts := strings.Split(glob, "*")
		for i, p := range parts {
			parts[i] = regexp.QuoteMeta(p)
		}
		re := regexp.MustCompile(`\A(?s:` + strings.Join(parts, ".*") + `)\z`)
		if got, want := Match(glob, s), re.MatchString(s); got != want {
			t.Fatalf("Match(%q, %q) = %v; the regexp says %v", glob, s, got, want)
		}
	})
}
