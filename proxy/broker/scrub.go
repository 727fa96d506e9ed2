package broker

import (
	"bytes"
	"io"
)

// pattern is one text the scrubber replaces, and what replaces it.
type pattern struct {
	text, repl []byte
	// border[i] is the length of the longest proper prefix of text[:i+1]
	// that is also its suffix (Knuth-Morris-Pratt), set by newScrubber.
	border []int
}

// Scrubber replaces secret values in response headers and bodies. Matching
// is leftmost, then longest, exactly as if the whole text were seen at
// once, yet a body streams through: a Reader holds back only the bytes at
// the end of what it has read that could still begin a secret (at most the
// longest pattern less one), so a server-sent event or chunk ending in a
// newline, which no secret holds, passes at once.
type Scrubber struct {
	pats   []pattern
	maxLen int
}

// borders is the Knuth-Morris-Pratt failure table of t.
func borders(t []byte) []int {
	b := make([]int, len(t))
	k := 0
	for i := 1; i < len(t); i++ {
		for k > 0 && t[i] != t[k] {
			k = b[k-1]
		}
		if t[i] == t[k] {
			k++
		}
		b[i] = k
	}
	return b
}

// newScrubber returns a scrubber of pats, or nil when there is none.
func newScrubber(pats []pattern) *Scrubber {
	if len(pats) == 0 {
		return nil
	}
	s := &Scrubber{pats: make([]pattern, len(pats))}
	for i, p := range pats {
		p.border = borders(p.text)
		s.pats[i] = p
		s.maxLen = max(s.maxLen, len(p.text))
	}
	return s
}

// String returns v with every pattern replaced.
func (s *Scrubber) String(v string) string {
	if s == nil {
		return v
	}
	out, _ := s.process([]byte(v), true, nil)
	return string(out)
}

// process appends to out the scrubbed text of buf that is decided, and
// returns how many bytes of buf it consumed; the rest must be offered
// again with more input after it. With eof the whole of buf is decided.
//
// Work per call is linear in len(buf) for the searches (each pattern's
// next occurrence is found once and kept until passed) plus the
// patterns' total length for the hold-back point (emitLimit).
func (s *Scrubber) process(buf []byte, eof bool, out []byte) ([]byte, int) {
	var stack [8]int
	next := stack[:0]
	for range s.pats {
		next = append(next, -1)
	}
	start := 0
	limit := s.emitLimit(buf, 0, eof)
	for {
		if start > limit {
			limit = s.emitLimit(buf, start, eof)
		}
		best, bestP := -1, -1
		for k := range s.pats {
			p := s.pats[k].text
			if next[k] >= 0 && next[k] < start {
				next[k] = -1
			}
			if next[k] == -1 {
				next[k] = len(buf) + 1
				if i := bytes.Index(buf[start:], p); i >= 0 {
					next[k] = start + i
				}
			}
			i := next[k]
			if i >= limit || i > len(buf) {
				continue
			}
			if best < 0 || i < best || i == best && len(p) > len(s.pats[bestP].text) {
				best, bestP = i, k
			}
		}
		if best < 0 {
			return append(out, buf[start:limit]...), limit
		}
		out = append(out, buf[start:best]...)
		out = append(out, s.pats[bestP].repl...)
		start = best + len(s.pats[bestP].text)
	}
}

// emitLimit is the first position at or after from where a pattern
// begins that buf ends before it is complete: the bytes from there on may
// yet be a secret and are held back; every pattern starting earlier is
// wholly in buf (or not there), so the text before is decided. With eof
// every position is decided. Each pattern's longest unfinished start is
// found by running its Knuth-Morris-Pratt automaton over the last
// len(pattern)-1 bytes: the work is linear in the patterns' length, not
// quadratic, whatever the text.
func (s *Scrubber) emitLimit(buf []byte, from int, eof bool) int {
	limit := len(buf)
	if eof {
		return limit
	}
	for k := range s.pats {
		p := &s.pats[k]
		q := 0
		for i := max(from, len(buf)-len(p.text)+1); i < len(buf); i++ {
			for q > 0 && buf[i] != p.text[q] {
				q = p.border[q-1]
			}
			if buf[i] == p.text[q] {
				q++
			}
			if q == len(p.text) {
				// A whole match is found by process; what may still grow
				// is its longest proper border.
				q = p.border[q-1]
			}
		}
		if q > 0 {
			limit = min(limit, len(buf)-q)
		}
	}
	return limit
}

// readSize is how much a scrubbing Reader asks of its source at once.
const readSize = 32 << 10

// Reader returns r's bytes scrubbed. onEOF, if not nil, runs once when r
// ends cleanly, before the last bytes are returned (trailers are complete
// then). On a read error the bytes held back are dropped, not sent: they
// may begin a secret.
func (s *Scrubber) Reader(r io.Reader, onEOF func()) io.Reader {
	return &scrubReader{s: s, src: r, onEOF: onEOF}
}

type scrubReader struct {
	s     *Scrubber
	src   io.Reader
	in    []byte // read, not yet decided
	out   []byte // decided, not yet returned
	off   int
	err   error
	onEOF func()
	// scanOnly passes decided bytes unchanged and fails with
	// ErrSecretInBody where a secret would be replaced.
	scanOnly bool
}

func (r *scrubReader) Read(p []byte) (int, error) {
	for r.off == len(r.out) {
		if r.err != nil {
			return 0, r.err
		}
		r.out, r.off = r.out[:0], 0
		if cap(r.in)-len(r.in) < readSize {
			grown := make([]byte, len(r.in), len(r.in)+readSize)
			copy(grown, r.in)
			r.in = grown
		}
		n, err := r.src.Read(r.in[len(r.in):cap(r.in)])
		r.in = r.in[:len(r.in)+n]
		switch {
		case err == io.EOF:
			if derr := r.decide(true); derr != nil {
				err = derr
			}
			if r.onEOF != nil {
				r.onEOF()
			}
		case err != nil:
			r.in = r.in[:0]
		default:
			err = r.decide(false)
		}
		r.err = err
	}
	n := copy(p, r.out[r.off:])
	r.off += n
	return n, nil
}

// decide moves what of in is decided to out, scrubbed (or, scanOnly,
// unchanged unless it holds a secret: then nothing is moved and
// ErrSecretInBody is returned).
func (r *scrubReader) decide(eof bool) error {
	start := len(r.out)
	var used int
	r.out, used = r.s.process(r.in, eof, r.out)
	if r.scanOnly && !bytes.Equal(r.out[start:], r.in[:used]) {
		r.out, r.in = r.out[:start], r.in[:0]
		return ErrSecretInBody
	}
	r.in = r.in[:copy(r.in, r.in[used:])]
	return nil
}
