// Package wildcard matches names (MCP tools, models) against the globs a
// rule lists, where "*" matches any run of characters (none included, "."
// and "/" too) and every other byte only itself, against the whole name.
// One matcher for every rule key that takes such globs, so that a tool
// list and a model list can never read one glob two ways.
package wildcard

import "strings"

// Any reports whether s matches one of globs.
func Any(globs []string, s string) bool {
	for _, g := range globs {
		if Match(g, s) {
			return true
		}
	}
	return false
}

// Match reports whether s matches glob. With stars as the only
// metacharacter, taking each literal part at its leftmost place after the
// previous one is enough, so a match costs one scan of s per part: linear
// whatever the input, never backtracking.
func Match(glob, s string) bool {
	first, rest, starred := strings.Cut(glob, "*")
	if !starred {
		return glob == s
	}
	if !strings.HasPrefix(s, first) {
		return false
	}
	s = s[len(first):]
	for {
		part, more, ok := strings.Cut(rest, "*")
		if !ok {
			// The last part ends the name.
			return len(s) >= len(part) && strings.HasSuffix(s, part)
		}
		i := strings.Index(s, part)
		if i < 0 {
			return false
		}
		s, rest = s[i+len(part):], more
	}
}
