// Package secretpat finds the shapes of well-known credentials (cloud
// access key ids, forge and chat tokens, model-provider keys, PEM private
// keys) in text that streams through, for the proxy to record or refuse a
// request that carries one. It knows shapes, not values: the values of
// the secrets egressd itself holds are package broker's.
//
// Every pattern is a literal prefix (one of a few) followed by a run of at
// least Min bytes of one byte class, and, when the prefix opens with a
// word character, not preceded by one. That is what an automaton over the
// prefixes (Aho-Corasick) and one run counter per pattern decide, one
// table step per byte: linear in the text whatever it holds, with state
// bounded by the patterns, and a match is decided as soon as its Min-th
// run byte arrives, so a stream is held back by at most the longest
// prefix plus the largest Min (Matcher.Pending). Go's regexp (RE2) would
// be linear too, but over a stream it needs a re-scan of a held-back
// window at every chunk; the fuzz target uses it as the whole-text
// witness.
package secretpat

import (
	"fmt"
	"math/bits"
	"sort"
	"strings"
)

// Pattern is one credential shape. Several patterns may share a name (a
// shape with two run classes); a finding names it once.
type Pattern struct {
	// Name is what a record says was found ("aws_access_key").
	Name string
	// Prefixes are the literal texts a match opens with, 2 to 63 bytes.
	Prefixes []string
	// Class lists the bytes of the run after the prefix as in a regular
	// expression's brackets: single bytes and ranges ("A-Za-z0-9_-"; a '-'
	// last is itself). Empty only when Min is 0.
	Class string
	// Min is how many bytes of Class must follow the prefix; 0 matches the
	// prefix alone.
	Min int
}

// Maximum sizes of a set, which bound a Matcher's hold-back and state.
const (
	MaxPatterns  = 64
	maxPrefixLen = 63
	MaxRun       = 256
)

// Defaults are the shapes shipped: what a sandbox most often holds by
// accident or finds lying around. OpenAI's legacy keys are "sk-" and
// letters and digits only, so that an Anthropic key ("sk-ant-api03-…")
// is not also reported as OpenAI's.
var Defaults = []Pattern{
	{Name: "aws_access_key", Prefixes: []string{"AKIA", "ASIA"}, Class: "A-Z0-9", Min: 16},
	{Name: "github_token", Prefixes: []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_"}, Class: "A-Za-z0-9", Min: 36},
	{Name: "github_token", Prefixes: []string{"github_pat_"}, Class: "A-Za-z0-9_", Min: 82},
	{Name: "gitlab_token", Prefixes: []string{"glpat-"}, Class: "A-Za-z0-9_-", Min: 20},
	{Name: "slack_token", Prefixes: []string{"xoxb-", "xoxp-", "xoxa-", "xoxr-", "xoxs-"}, Class: "A-Za-z0-9-", Min: 10},
	{Name: "openai_api_key", Prefixes: []string{"sk-proj-", "sk-svcacct-", "sk-admin-"}, Class: "A-Za-z0-9_-", Min: 20},
	{Name: "openai_api_key", Prefixes: []string{"sk-"}, Class: "A-Za-z0-9", Min: 20},
	{Name: "anthropic_api_key", Prefixes: []string{"sk-ant-"}, Class: "A-Za-z0-9_-", Min: 20},
	{Name: "google_api_key", Prefixes: []string{"AIza"}, Class: "A-Za-z0-9_-", Min: 35},
	{Name: "private_key", Prefixes: []string{
		"-----BEGIN PRIVATE KEY-----", "-----BEGIN RSA PRIVATE KEY-----", "-----BEGIN EC PRIVATE KEY-----",
		"-----BEGIN DSA PRIVATE KEY-----", "-----BEGIN OPENSSH PRIVATE KEY-----",
		"-----BEGIN ENCRYPTED PRIVATE KEY-----", "-----BEGIN PGP PRIVATE KEY BLOCK-----",
	}},
}

// Found is a set of patterns of a Set, by index.
type Found uint64

// Set is a compiled list of patterns, immutable and shared by every
// request.
type Set struct {
	pats    []Pattern
	min     []int32
	bounded Found // patterns whose prefixes open with a word character
	// member[c] is the patterns whose class holds byte c.
	member [256]Found
	// The prefix automaton: a DFA over byte classes (bytes no prefix
	// holds are class 0). next[state*nclass+cls[c]] is the row (state*nclass) of the next state.
	cls    [256]uint8
	nclass int
	next   []int32
	depth  []int32 // length of the prefix text a state stands for
	out    [][]hit // the prefixes ending at a state
	ends   []bool  // ends[state*nclass]: len(out[state]) > 0
}

// hit is a prefix that ends at an automaton state.
type hit struct {
	pat int32
	len int32
}

// New compiles pats; nil and empty compile to nil, which finds nothing.
func New(pats []Pattern) (*Set, error) {
	if len(pats) == 0 {
		return nil, nil
	}
	if len(pats) > MaxPatterns {
		return nil, fmt.Errorf("%d secret patterns, at most %d", len(pats), MaxPatterns)
	}
	s := &Set{pats: pats, min: make([]int32, len(pats))}
	for i, p := range pats {
		if p.Name == "" || len(p.Prefixes) == 0 {
			return nil, fmt.Errorf("secret pattern [%d] needs a name and a prefix", i)
		}
		if p.Min < 0 || p.Min > MaxRun {
			return nil, fmt.Errorf("secret pattern %q: min must be 0 to %d, got %d", p.Name, MaxRun, p.Min)
		}
		class, err := parseClass(p.Class)
		if err != nil || p.Min > 0 && class == ([256]bool{}) {
			return nil, fmt.Errorf("secret pattern %q: class %q: need byte ranges like A-Za-z0-9", p.Name, p.Class)
		}
		for c, in := range class {
			if in {
				s.member[c] |= 1 << i
			}
		}
		s.min[i] = int32(p.Min)
		for _, pre := range p.Prefixes {
			if len(pre) < 2 || len(pre) > maxPrefixLen {
				return nil, fmt.Errorf("secret pattern %q: prefix %q must be 2 to %d bytes", p.Name, pre, maxPrefixLen)
			}
		}
		if isWord(p.Prefixes[0][0]) {
			s.bounded |= 1 << i
			for _, pre := range p.Prefixes {
				if !isWord(pre[0]) {
					return nil, fmt.Errorf("secret pattern %q: prefixes must all open with a word character or none", p.Name)
				}
			}
		}
	}
	s.build()
	return s, nil
}

// MustDefaults is the compiled Defaults.
func MustDefaults() *Set {
	s, err := New(Defaults)
	if err != nil {
		panic(err)
	}
	return s
}

func isWord(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_'
}

// parseClass reads a bracket list of bytes and ranges.
func parseClass(c string) ([256]bool, error) {
	var in [256]bool
	for i := 0; i < len(c); i++ {
		lo, hi := c[i], c[i]
		if i+2 < len(c) && c[i+1] == '-' {
			hi = c[i+2]
			i += 2
		}
		// Kept to what a regular expression's brackets read the same way.
		if lo > hi || strings.ContainsAny(string([]byte{lo, hi}), `\[]^`) {
			return in, fmt.Errorf("bad class")
		}
		for b := int(lo); b <= int(hi); b++ {
			in[b] = true
		}
	}
	return in, nil
}

// build makes the prefix automaton: a trie of every prefix, with each
// state's missing transitions filled from its failure state (the longest
// proper suffix that is a trie state), breadth first.
func (s *Set) build() {
	for _, p := range s.pats {
		for _, pre := range p.Prefixes {
			for i := 0; i < len(pre); i++ {
				if s.cls[pre[i]] == 0 {
					s.nclass++
					s.cls[pre[i]] = uint8(s.nclass)
				}
			}
		}
	}
	s.nclass++
	nc := s.nclass
	newState := func(depth int32) int32 {
		s.next = append(s.next, make([]int32, nc)...)
		for k := len(s.next) - nc; k < len(s.next); k++ {
			s.next[k] = -1
		}
		s.depth = append(s.depth, depth)
		s.out = append(s.out, nil)
		return int32(len(s.depth) - 1)
	}
	newState(0)
	for i, p := range s.pats {
		for _, pre := range p.Prefixes {
			st := int32(0)
			for j := 0; j < len(pre); j++ {
				k := int(st)*nc + int(s.cls[pre[j]])
				if s.next[k] < 0 {
					ns := newState(int32(j + 1))
					s.next[k] = ns
				}
				st = s.next[k]
			}
			s.out[st] = append(s.out[st], hit{pat: int32(i), len: int32(len(pre))})
		}
	}
	fail := make([]int32, len(s.depth))
	queue := []int32{}
	for c := 0; c < nc; c++ {
		if t := s.next[c]; t < 0 {
			s.next[c] = 0
		} else {
			queue = append(queue, t)
		}
	}
	for len(queue) > 0 {
		st := queue[0]
		queue = queue[1:]
		s.out[st] = append(s.out[st], s.out[fail[st]]...)
		for c := 0; c < nc; c++ {
			k := int(st)*nc + c
			if t := s.next[k]; t < 0 {
				s.next[k] = s.next[int(fail[st])*nc+c]
			} else {
				fail[t] = s.next[int(fail[st])*nc+c]
				queue = append(queue, t)
			}
		}
	}
	// From here on next holds the row (state × nclass) of the next
	// state, and ends is indexed by row: one multiplication less a byte.
	for k, t := range s.next {
		s.next[k] = t * int32(nc)
	}
	s.ends = make([]bool, len(s.next))
	for st, o := range s.out {
		s.ends[st*nc] = len(o) > 0
	}
}

// Names are the names of the patterns in f, sorted, each once.
func (s *Set) Names(f Found) []string {
	if s == nil || f == 0 {
		return nil
	}
	var names []string
	for f != 0 {
		i := bits.TrailingZeros64(uint64(f))
		f &^= 1 << i
		n := s.pats[i].Name
		if k := sort.SearchStrings(names, n); k == len(names) || names[k] != n {
			names = append(names, "")
			copy(names[k+1:], names[k:])
			names[k] = n
		}
	}
	return names
}

// FindString returns the patterns found in v.
func (s *Set) FindString(v string) Found {
	if s == nil {
		return 0
	}
	var m Matcher
	m.Reset(s)
	_, _ = m.Write([]byte(v)) // a Matcher never fails a write
	return m.Found()
}

// Redact returns v with every match replaced, its whole run, by
// repl(name): for text that is kept (a record's path and query). Matches
// are replaced as the automaton finds their prefixes' ends, each
// replaced one skipped past; a run is read at most once past Min for a
// candidate that falls short, so the work is linear in v.
func (s *Set) Redact(v string, repl func(name string) string) string {
	if s == nil {
		return v
	}
	var b strings.Builder
	last, row, nc := 0, int32(0), int32(s.nclass)
	for i := 0; i < len(v); i++ {
		row = s.next[row+int32(s.cls[v[i]])]
		if !s.ends[row] {
			continue
		}
		for _, h := range s.out[row/nc] {
			bit := Found(1) << h.pat
			begin := i - int(h.len) + 1
			if begin < last || s.bounded&bit != 0 && begin > 0 && isWord(v[begin-1]) {
				continue
			}
			end := i + 1
			for end < len(v) && s.member[v[end]]&bit != 0 {
				end++
			}
			if end-i-1 < int(s.min[h.pat]) {
				continue
			}
			b.WriteString(v[last:begin])
			b.WriteString(repl(s.pats[h.pat].Name))
			last, i, row = end, end-1, 0
			break
		}
	}
	if last == 0 {
		return v
	}
	b.WriteString(v[last:])
	return b.String()
}

// Matcher finds a Set's patterns in a stream written to it. The zero
// value finds nothing until Reset.
type Matcher struct {
	s      *Set
	state  int32
	n      int64 // bytes written
	found  Found
	active Found // patterns whose run is being counted
	run    [MaxPatterns]int32
	start  [MaxPatterns]int64 // where an active pattern's prefix began
	// hist holds the last bytes written, for the byte before a prefix.
	hist [maxPrefixLen + 1]byte
}

// NewMatcher returns a matcher of s; nil when s is nil.
func (s *Set) NewMatcher() *Matcher {
	if s == nil {
		return nil
	}
	m := &Matcher{}
	m.Reset(s)
	return m
}

// Reset makes m a new matcher of s.
func (m *Matcher) Reset(s *Set) {
	*m = Matcher{s: s}
}

// Write feeds p to the matcher; it never fails.
func (m *Matcher) Write(p []byte) (int, error) {
	s := m.s
	row := m.state * int32(s.nclass)
	next, cls, ends := s.next, &s.cls, s.ends
	for i := 0; i < len(p); i++ {
		row = next[row+int32(cls[p[i]])]
		// The common byte moves the automaton and nothing else.
		if ends[row] || m.active != 0 {
			m.event(p, i, row/int32(s.nclass))
		}
	}
	m.state = row / int32(s.nclass)
	m.remember(p)
	return len(p), nil
}

// event counts p[i] on the active runs and starts the runs of the
// prefixes that end at it (state st).
func (m *Matcher) event(p []byte, i int, st int32) {
	s := m.s
	if m.active != 0 {
		keep := m.active & s.member[p[i]]
		m.active = keep
		for keep != 0 {
			k := bits.TrailingZeros64(uint64(keep))
			keep &^= 1 << k
			m.run[k]++
			if m.run[k] >= s.min[k] {
				m.found |= 1 << k
				m.active &^= 1 << k
			}
		}
	}
	at := m.n + int64(i)
	for _, h := range s.out[st] {
		bit := Found(1) << h.pat
		if (m.found|m.active)&bit != 0 {
			// A pattern found stays found; one being counted started
			// earlier and is ahead of this occurrence on the same run.
			continue
		}
		begin := at - int64(h.len) + 1
		if s.bounded&bit != 0 && begin > 0 && isWord(m.byteAt(p, begin-1)) {
			continue
		}
		if s.min[h.pat] == 0 {
			m.found |= bit
			continue
		}
		m.active |= bit
		m.run[h.pat], m.start[h.pat] = 0, begin
	}
}

// byteAt is the byte at stream offset off, which is in p (written from
// m.n on) or among the last len(m.hist) bytes before it.
func (m *Matcher) byteAt(p []byte, off int64) byte {
	if off >= m.n {
		return p[off-m.n]
	}
	return m.hist[off%int64(len(m.hist))]
}

// remember keeps p's last bytes in hist and counts p.
func (m *Matcher) remember(p []byte) {
	from := max(0, len(p)-len(m.hist))
	for i := from; i < len(p); i++ {
		m.hist[(m.n+int64(i))%int64(len(m.hist))] = p[i]
	}
	m.n += int64(len(p))
}

// Found is the patterns found in everything written so far.
func (m *Matcher) Found() Found {
	if m == nil {
		return 0
	}
	return m.found
}

// Pending is how many of the last bytes written may still be part of a
// match not yet decided: a prefix begun, or a run still short of Min.
// The bytes before them are decided. At most the longest prefix plus
// the largest Min.
func (m *Matcher) Pending() int {
	if m == nil {
		return 0
	}
	p := int64(m.s.depth[m.state])
	for a := m.active; a != 0; {
		i := bits.TrailingZeros64(uint64(a))
		a &^= 1 << i
		p = max(p, m.n-m.start[i])
	}
	return int(p)
}
