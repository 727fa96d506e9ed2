package secretpat

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// witness compiles each pattern to a Go regular expression over the whole
// text: the independent reading of what a Pattern means.
func witness(pats []Pattern) []*regexp.Regexp {
	res := make([]*regexp.Regexp, len(pats))
	for i, p := range pats {
		var alts []string
		for _, pre := range p.Prefixes {
			a := regexp.QuoteMeta(pre)
			if isWord(pre[0]) {
				a = `(?:^|[^0-9A-Za-z_])` + a
			}
			alts = append(alts, a)
		}
		run := ""
		if p.Min > 0 {
			run = "[" + p.Class + "]{" + strconv.Itoa(p.Min) + "}"
		}
		res[i] = regexp.MustCompile(`(?s)(?:` + strings.Join(alts, "|") + `)` + run)
	}
	return res
}

func witnessFound(res []*regexp.Regexp, text string) Found {
	var f Found
	for i, re := range res {
		if re.MatchString(text) {
			f |= 1 << i
		}
	}
	return f
}

var examples = []struct {
	name, text string
	want       []string
}{
	{"aws", "key=AKIAIOSFODNN7EXAMPLE&x", []string{"aws_access_key"}},
	{"aws short", "AKIAIOSFODNN7EXAMPL", nil},
	{"aws inside a word", "xAKIAIOSFODNN7EXAMPLE", nil},
	{"aws sts", `{"k":"ASIAY34FZKBOKMUTVV7A"}`, []string{"aws_access_key"}},
	{"github classic", "token ghp_" + strings.Repeat("a1B2", 9), []string{"github_token"}},
	{"github fine-grained", "github_pat_" + strings.Repeat("A_b1", 21), []string{"github_token"}},
	{"gitlab", "PRIVATE-TOKEN: glpat-abcdefghij_-KLMNOPQR", []string{"gitlab_token"}},
	{"slack", "Bearer xoxb-1234-5678-abc", []string{"slack_token"}},
	{"openai project", "sk-proj-" + strings.Repeat("Ab_-", 5), []string{"openai_api_key"}},
	{"openai legacy", "sk-" + strings.Repeat("Ab3", 7), []string{"openai_api_key"}},
	{"anthropic", "x-api-key: sk-ant-api03-" + strings.Repeat("Zz9_", 6), []string{"anthropic_api_key"}},
	{"not in task-…", "task-management-service-for-everyone", nil},
	{"google", "AIza" + strings.Repeat("Sy-_1", 7), []string{"google_api_key"}},
	{"pem", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn", []string{"private_key"}},
	{"pem public", "-----BEGIN PUBLIC KEY-----", nil},
	{"two", "AKIAIOSFODNN7EXAMPLE -----BEGIN PRIVATE KEY-----", []string{"aws_access_key", "private_key"}},
}

func TestDefaults(t *testing.T) {
	s := MustDefaults()
	res := witness(Defaults)
	for _, tc := range examples {
		t.Run(tc.name, func(t *testing.T) {
			f := s.FindString(tc.text)
			if got := s.Names(f); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("FindString(%q) = %v; want %v", tc.text, got, tc.want)
			}
			if w := witnessFound(res, tc.text); w != f {
				t.Errorf("FindString(%q) = %b; regexp witness %b", tc.text, f, w)
			}
		})
	}
}

// TestSplitAtEveryOffset writes each example in two pieces at every cut:
// the stream's answer is the whole text's.
func TestSplitAtEveryOffset(t *testing.T) {
	s := MustDefaults()
	for _, tc := range examples {
		want := s.FindString(tc.text)
		for cut := 0; cut <= len(tc.text); cut++ {
			m := s.NewMatcher()
			m.Write([]byte(tc.text[:cut]))
			m.Write([]byte(tc.text[cut:]))
			if m.Found() != want {
				t.Fatalf("%s cut at %d: found %b; want %b", tc.name, cut, m.Found(), want)
			}
		}
	}
}

// TestPendingCoversMatch checks the hold-back: the bytes a matcher has
// decided (all but Pending) never hold a whole match it had not found by
// then.
func TestPendingCoversMatch(t *testing.T) {
	s := MustDefaults()
	res := witness(Defaults)
	for _, tc := range examples {
		checkPending(t, s, res, tc.text, []int{1})
	}
}

func checkPending(t *testing.T, s *Set, res []*regexp.Regexp, text string, sizes []int) {
	t.Helper()
	m := s.NewMatcher()
	// The witness scans the whole decided prefix, so checking it after
	// every write would make this oracle quadratic in the text (a 4 KiB
	// input in 1-byte writes took 3 s, which the fuzzer took for a hang):
	// it checks after writes at most len(text)/64 bytes apart, and at the
	// end. The bound on Pending is checked after every write.
	step := max(1, len(text)/64)
	for i, k, next := 0, 0, 0; i < len(text); k++ {
		n := max(1, sizes[k%len(sizes)])
		n = min(n, len(text)-i)
		m.Write([]byte(text[i : i+n]))
		i += n
		if i >= next || i == len(text) {
			next = i + step
			decided := text[:i-m.Pending()]
			if w := witnessFound(res, decided); w&^m.Found() != 0 {
				t.Fatalf("after %d bytes of %q: decided %q holds %b, found only %b", i, text, decided, w, m.Found())
			}
		}
		if p := m.Pending(); p > maxPrefixLen+MaxRun {
			t.Fatalf("pending %d past the bound", p)
		}
	}
}

func TestRedact(t *testing.T) {
	s := MustDefaults()
	repl := func(n string) string { return "<" + n + ">" }
	for _, tc := range []struct{ in, want string }{
		{"k=AKIAIOSFODNN7EXAMPLEXYZ&x=1", "k=<aws_access_key>&x=1"},
		{"a sk-ant-api03-" + strings.Repeat("Zz9_", 6) + " b", "a <anthropic_api_key> b"},
		{"-----BEGIN PRIVATE KEY-----\nMIIE", "<private_key>\nMIIE"},
		{"nothing here", "nothing here"},
	} {
		if got := s.Redact(tc.in, repl); got != tc.want {
			t.Errorf("Redact(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Pattern
	}{
		{"no name", Pattern{Prefixes: []string{"ab"}}},
		{"short prefix", Pattern{Name: "x", Prefixes: []string{"a"}}},
		{"no class", Pattern{Name: "x", Prefixes: []string{"ab"}, Min: 3}},
		{"mixed opening", Pattern{Name: "x", Prefixes: []string{"ab", "-b"}}},
		{"reversed range", Pattern{Name: "x", Prefixes: []string{"ab"}, Class: "z-a", Min: 1}},
		{"bracket in class", Pattern{Name: "x", Prefixes: []string{"ab"}, Class: "a-z]", Min: 1}},
		{"long run", Pattern{Name: "x", Prefixes: []string{"ab"}, Class: "a", Min: MaxRun + 1}},
	} {
		if _, err := New([]Pattern{tc.p}); err == nil {
			t.Errorf("New(%s) = nil error; want one", tc.name)
		}
	}
}

// FuzzMatcher checks the streamed matcher against Go's regexp over the
// whole text, both ways (every pattern either finds is found by the
// other), on the defaults and on small patterns the fuzzer can hit, in
// the chunking the fuzzer picks, with the hold-back bound and its safety.
func FuzzMatcher(f *testing.F) {
	for _, tc := range examples {
		f.Add(tc.text, uint8(3), uint8(7))
	}
	f.Add("ab-ab-abxxxx ab xx", uint8(1), uint8(2))
	small := []Pattern{
		{Name: "p1", Prefixes: []string{"ab", "ba"}, Class: "x-z", Min: 2},
		{Name: "p2", Prefixes: []string{"a-b", "b-"}, Class: "a-b", Min: 3},
		{Name: "p3", Prefixes: []string{"-a"}},
		{Name: "p4", Prefixes: []string{"aab", "ab"}, Class: "ab-", Min: 1},
	}
	sets := []*Set{MustDefaults(), mustNew(small)}
	wits := [][]*regexp.Regexp{witness(Defaults), witness(small)}
	f.Fuzz(func(t *testing.T, text string, a, b uint8) {
		for k, s := range sets {
			m := s.NewMatcher()
			sizes := []int{int(a%17) + 1, int(b%64) + 1}
			checkPending(t, s, wits[k], text, sizes)
			m.Write([]byte(text))
			if w := witnessFound(wits[k], text); w != m.Found() {
				t.Fatalf("set %d on %q: found %b; regexp witness %b", k, text, m.Found(), w)
			}
			if r := s.Redact(text, func(string) string { return "#" }); (r != text) != (m.Found() != 0) {
				t.Fatalf("set %d: Redact(%q) = %q; found %b", k, text, r, m.Found())
			}
		}
	})
}

func mustNew(p []Pattern) *Set {
	s, err := New(p)
	if err != nil {
		panic(err)
	}
	return s
}

func BenchmarkMatcher(b *testing.B) {
	s := MustDefaults()
	text := []byte(strings.Repeat(`{"key":"value","sk":"task-1","n":12345} `, 1<<14))
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	m := s.NewMatcher()
	for b.Loop() {
		m.Reset(s)
		m.Write(text)
	}
}
