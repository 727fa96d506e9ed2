package policy

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// modulesWithData returns the default bundle's production modules with
// data.json as given.
func modulesWithData(t testing.TB, data string) string {
	t.Helper()
	dir := t.TempDir()
	mods, err := filepathGlobFS()
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range mods {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "data.json"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// pathRules allow one tree and deny another on the same host.
const pathRules = `{"rules": [
  {"id": "docs", "hosts": ["p.test"], "ports": [80], "methods": ["GET"], "paths": ["/docs/**", "/one/*"]},
  {"id": "no-admin", "hosts": ["p.test"], "ports": [80], "paths": ["/admin/**"], "action": "deny"},
  {"id": "rest", "hosts": ["p.test"], "ports": [80]}
]}`

func decidePath(t *testing.T, e *Engine, path string) Decision {
	t.Helper()
	return e.Decide(context.Background(), Input{Facts: mustParse(t, "GET", "http://p.test"+path)})
}

// TestPathGlobCoversTreeRoot: "/p/**" matches "/p" itself (item 9), and
// still only what lies under /p; "*" still needs a segment.
func TestPathGlobCoversTreeRoot(t *testing.T) {
	e := newTestEngine(t, Config{Dir: modulesWithData(t, pathRules)})
	tests := []struct {
		name, path, rule string
	}{
		{"tree root", "/docs", "docs"},
		{"tree root slash", "/docs/", "docs"},
		{"in tree", "/docs/a/b", "docs"},
		{"sibling prefix", "/docsx", "rest"},
		{"deny root", "/admin", "no-admin"},
		{"deny in tree", "/admin/users", "no-admin"},
		{"star needs a segment", "/one", "rest"},
		{"star one segment", "/one/x", "docs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := decidePath(t, e, tt.path); d.Rule != tt.rule {
				t.Errorf("Decide(GET %s) = %+v; want rule %s", tt.path, d, tt.rule)
			}
		})
	}
}

// TestPathMatchCase: path globs match case-sensitively for allow rules (an
// upstream may serve /DOCS as another resource), and in any ASCII case for
// deny rules (an upstream that folds case must not dodge a deny).
func TestPathMatchCase(t *testing.T) {
	e := newTestEngine(t, Config{Dir: modulesWithData(t, pathRules)})
	tests := []struct {
		name, path, rule string
		allow            bool
	}{
		{"allow exact case", "/docs/Guide", "docs", true},
		{"allow other case", "/DOCS/guide", "rest", true},
		{"deny upper", "/ADMIN/users", "no-admin", false},
		{"deny mixed", "/aDmIn", "no-admin", false},
		{"deny percent-encoded letter", "/%41dmin/x", "no-admin", false},
		{"deny lower", "/admin/x", "no-admin", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := decidePath(t, e, tt.path); d.Rule != tt.rule || d.Allow != tt.allow {
				t.Errorf("Decide(GET %s) = %+v; want rule %s allow %v", tt.path, d, tt.rule, tt.allow)
			}
		})
	}
}

// TestPathFlagsInvalidUTF8: decoded bytes that are not UTF-8 are refused
// (invalid_utf8), and an overlong form of an ASCII byte also carries that
// byte's flag: an overlong "/" is an encoded separator, and it is the
// reason, whatever the rules allow.
func TestPathFlagsInvalidUTF8(t *testing.T) {
	tests := []pathFlagsCase{
		{"overlong slash 2", "/a%C0%AFb", FlagEncodedSeparator | FlagInvalidUTF8},
		{"overlong slash 3", "/a%E0%80%AFb", FlagEncodedSeparator | FlagInvalidUTF8},
		{"overlong slash 4", "/a%F0%80%80%AFb", FlagEncodedSeparator | FlagInvalidUTF8},
		{"overlong slash 5", "/a%F8%80%80%80%AFb", FlagEncodedSeparator | FlagInvalidUTF8},
		{"overlong slash 6", "/a%FC%80%80%80%80%AFb", FlagEncodedSeparator | FlagInvalidUTF8},
		{"overlong backslash", "/a%C1%9Cb", FlagEncodedSeparator | FlagInvalidUTF8},
		{"overlong dot", "/a/%C0%AE%C0%AE/b", FlagEncodedDot | FlagInvalidUTF8},
		{"overlong dot 3", "/a/%E0%80%AE", FlagEncodedDot | FlagInvalidUTF8},
		{"overlong NUL", "/a%C0%80", FlagControlCharacter | FlagInvalidUTF8},
		{"overlong semicolon", "/a%C0%BB", FlagPathParameter | FlagInvalidUTF8},
		{"overlong letter", "/%C1%81", FlagInvalidUTF8},
		{"lone continuation", "/a%80", FlagInvalidUTF8},
		{"truncated", "/a%E2%82", FlagInvalidUTF8},
		{"surrogate", "/a%ED%A0%80", FlagInvalidUTF8},
		{"raw invalid byte", "/a\xff", FlagInvalidUTF8},
		{"valid two-byte", "/caf%C3%A9", 0},
		{"valid raw", "/café/€", 0},
		{"valid U+FFFD", "/a%EF%BF%BD", 0},
	}
	checkPathFlags(t, tests)
	e := newTestEngine(t, Config{Dir: modulesWithData(t, pathRules)})
	for path, reason := range map[string]Reason{
		"/docs%C0%AF..%C0%AFadmin": "encoded_separator",
		"/docs/%C0%AE%C0%AE":       "encoded_dot",
		"/docs/%FF":                "invalid_utf8",
	} {
		if d := decidePath(t, e, path); d.Allow || d.Reason != reason {
			t.Errorf("Decide(GET %s) = %+v; want deny %s", path, d, reason)
		}
	}
}

// TestDenyPathTrailingDotsAndSpaces: a Windows-backed upstream drops the
// trailing dots and spaces of a segment, so "/admin./x" and "/admin%20/x"
// are /admin/x to it: deny rules match that form too, while an allow rule
// is not widened ("/docs./x" is not under /docs), and a segment of dots
// and spaces (".%20", "..%20", "...") is a dot segment.
func TestDenyPathTrailingDotsAndSpaces(t *testing.T) {
	e := newTestEngine(t, Config{Dir: modulesWithData(t, pathRules)})
	tests := []struct {
		name, path, rule string
		reason           Reason
		allow            bool
	}{
		{"trailing dot", "/admin./x", "no-admin", "rule_deny", false},
		{"trailing dots", "/admin../x", "no-admin", "rule_deny", false},
		{"trailing encoded space", "/admin%20/x", "no-admin", "rule_deny", false},
		{"trailing dot and space", "/admin.%20./x", "no-admin", "rule_deny", false},
		{"last segment", "/admin.", "no-admin", "rule_deny", false},
		{"folded case too", "/ADMIN%20", "no-admin", "rule_deny", false},
		{"space-only segment collapses", "/admin/%20/x", "no-admin", "rule_deny", false},
		{"inner dot kept", "/admin.x/y", "rest", "allowed", true},
		{"leading space kept", "/%20admin/x", "rest", "allowed", true},
		{"allow not widened", "/docs./a", "rest", "allowed", true},
		{"allow exact still", "/docs/a.", "docs", "allowed", true},
		{"dot space segment", "/docs/..%20/admin", "", "dot_segment", false},
		{"three dots segment", "/docs/.../admin", "", "dot_segment", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := decidePath(t, e, tt.path); d.Rule != tt.rule || d.Allow != tt.allow || d.Reason != tt.reason {
				t.Errorf("Decide(GET %s) = %+v; want rule %q reason %s allow %v", tt.path, d, tt.rule, tt.reason, tt.allow)
			}
		})
	}
}

func TestWindowsForm(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/a/b", "/a/b"},
		{"/", "/"},
		{"/a/", "/a/"},
		{"/a./b", "/a/b"},
		{"/a . ./b", "/a/b"},
		{"/a/ /b", "/a/b"},
		{"/a.", "/a"},
		{"/ ", "/"},
		{"/a.b/c", "/a.b/c"},
		{"/ a/b", "/ a/b"},
		{"/a//b.", "/a//b"},
	}
	for _, tt := range tests {
		if got := windowsForm(tt.in); got != tt.want {
			t.Errorf("windowsForm(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
}
