package broker

import (
	"bytes"
	"io"
)

// pattern is one text the scrubber replaces, and what replaces it. The
// text is matched against the decoded view of the input (see unit): a
// percent escape, a JSON escape (\uXXXX, \/, \", \\) and the byte itself
// are one and the same there, so any mix of escaped and plain bytes is
// found. fold matches ASCII letters in any case (text is lower case
// then).
type pattern struct {
	text, repl []byte
	fold       bool
	// name is the secret's, for a scan to say which one it found.
	name string
	// border[i] is the length of the longest proper prefix of text[:i+1]
	// that is also its suffix (Knuth-Morris-Pratt), set by newScrubber.
	border []int
}

// Scrubber replaces secret values in response headers and bodies. Matching
// is leftmost, then longest, exactly as if the whole text were seen at
// once, in three stages: over the raw bytes, then over the view with
// percent escapes decoded, then over the view with percent and JSON
// escapes decoded, each over what the stage before left, so a secret is
// found as written (after a stray '%' too) and escaped. The percent-only
// stage finds a secret that itself holds a JSON escape (`a\"b`) written
// with percent escapes around it (`a\%22b`), which a URL decoder turns
// back into the secret but the combined view reads as `\` and `"`. Yet a body streams through: each stage
// holds back only the bytes at the end of what it has read that could
// still begin a secret (at most the longest pattern less one unit, and
// an escape cut short), so a server-sent event or chunk ending in a
// newline, which no secret holds, passes at once. A match replaces the
// raw bytes it spans, escapes and all.
type Scrubber struct {
	pats []pattern
	// esc is the escapes the view this stage matches over decodes.
	esc escapes
	// then is the decoded stage after the raw one; nil on the last.
	then *Scrubber
	// longest is the length of the longest pattern.
	longest int
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
		if p.fold {
			p.text = bytes.ToLower(p.text)
		}
		p.border = borders(p.text)
		s.pats[i] = p
		s.longest = max(s.longest, len(p.text))
	}
	s.then = &Scrubber{pats: s.pats, esc: percentEscapes, longest: s.longest,
		then: &Scrubber{pats: s.pats, esc: percentEscapes | jsonEscapes, longest: s.longest}}
	return s
}

// escapes are the escapes a view decodes.
type escapes uint8

const (
	percentEscapes escapes = 1 << iota // %XX
	jsonEscapes                        // \uXXXX below 0x80, \/, \", \\
)

// String returns v with every pattern replaced.
func (s *Scrubber) String(v string) string {
	if s == nil {
		return v
	}
	var v2 view
	for st := s; st != nil; st = st.then {
		out, _, _ := st.process([]byte(v), true, nil, &v2)
		v = string(out)
	}
	return v
}

// view is the decoded form of a buffer: exact and case-folded bytes, and
// where each decoded byte starts in the raw buffer (off has one more
// entry: the end of the last; nil when every byte is a unit, ex is then
// the buffer itself). Kept by a Reader between reads.
type view struct {
	ex, fo []byte
	off    []int32
}

// at is where unit i starts in the raw buffer.
func (v *view) at(i int) int {
	if v.off == nil {
		return i
	}
	return int(v.off[i])
}

// unit decodes the escape or byte at buf[i]: its value and raw length.
// ok is false when buf ends inside what may be an escape and more input
// may follow (eof false): the unit is not decided yet.
func unit(buf []byte, i int, eof bool, esc escapes) (c byte, n int, ok bool) {
	c = buf[i]
	rest := buf[i+1:]
	switch {
	case c == '%' && esc&percentEscapes != 0:
		if len(rest) >= 2 {
			if hexVal(rest[0]) >= 0 && hexVal(rest[1]) >= 0 {
				return byte(hexVal(rest[0])<<4 | hexVal(rest[1])), 3, true
			}
			return c, 1, true
		}
		for _, h := range rest {
			if hexVal(h) < 0 {
				return c, 1, true
			}
		}
		return c, 1, eof
	case c == '\\' && esc&jsonEscapes != 0:
		if len(rest) == 0 {
			return c, 1, eof
		}
		switch rest[0] {
		case '/', '"', '\\':
			return rest[0], 2, true
		case 'u':
		default:
			return c, 1, true
		}
		v := 0
		for k := 1; k <= 4; k++ {
			if k >= len(rest) {
				return c, 1, eof
			}
			h := hexVal(rest[k])
			if h < 0 {
				return c, 1, true
			}
			v = v<<4 | h
		}
		if v < 0x80 {
			return byte(v), 6, true
		}
		return c, 1, true
	}
	return c, 1, true
}

func hexVal(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// hasEscape reports whether buf holds the opening of an escape esc
// decodes.
func hasEscape(buf []byte, esc escapes) bool {
	return esc&percentEscapes != 0 && bytes.IndexByte(buf, '%') >= 0 || esc&jsonEscapes != 0 && bytes.IndexByte(buf, '\\') >= 0
}

// decode fills v with buf's decided units and returns how many there are;
// each byte is a unit unless buf holds an escape esc decodes.
func (v *view) decode(buf []byte, eof bool, esc escapes) int {
	if !hasEscape(buf, esc) {
		v.ex, v.off = buf, nil
		v.fo = append(v.fo[:0], buf...)
		for i, c := range v.fo {
			if 'A' <= c && c <= 'Z' {
				v.fo[i] = c + 'a' - 'A'
			}
		}
		return len(buf)
	}
	if v.off == nil {
		// ex aliased the last buffer.
		v.ex = nil
	}
	v.ex, v.fo, v.off = v.ex[:0], v.fo[:0], v.off[:0]
	i := 0
	for i < len(buf) {
		c, n, ok := unit(buf, i, eof, esc)
		if !ok {
			break
		}
		v.ex = append(v.ex, c)
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		v.fo = append(v.fo, c)
		v.off = append(v.off, int32(i))
		i += n
	}
	v.off = append(v.off, int32(i))
	return len(v.ex)
}

// of is the view pattern p is matched against.
func (v *view) of(p *pattern) []byte {
	if p.fold {
		return v.fo
	}
	return v.ex
}

// process appends to out the scrubbed text of buf that is decided, and
// returns how many bytes of buf it consumed; the rest must be offered
// again with more input after it, and the index of the first pattern it
// replaced (-1 for none). With eof the whole of buf is decided.
//
// Work per call is linear in len(buf) for the decoding and the searches
// (each pattern's next occurrence is found once and kept until passed)
// plus the patterns' total length for the hold-back point (emitLimit).
func (s *Scrubber) process(buf []byte, eof bool, out []byte, v *view) ([]byte, int, int) {
	if s.esc != 0 && !hasEscape(buf, s.esc) {
		// A decoded stage over bytes with no escape sees them as the raw
		// stage did, and every match there was replaced (or refused)
		// before: only the hold-back point is left to find, in the tail.
		off := max(0, len(buf)-s.longest)
		n := v.decode(buf[off:], eof, s.esc)
		limit := off + s.emitLimit(v, n, 0, eof)
		return append(out, buf[:limit]...), limit, -1
	}
	n := v.decode(buf, eof, s.esc)
	var stack [16]int
	next := stack[:0]
	for range s.pats {
		next = append(next, -1)
	}
	start, first := 0, -1
	limit := s.emitLimit(v, n, 0, eof)
	for {
		if start > limit {
			limit = s.emitLimit(v, n, start, eof)
		}
		best, bestP := -1, -1
		for k := range s.pats {
			p := s.pats[k].text
			if next[k] >= 0 && next[k] < start {
				next[k] = -1
			}
			if next[k] == -1 {
				next[k] = n + 1
				if i := bytes.Index(v.of(&s.pats[k])[start:n], p); i >= 0 {
					next[k] = start + i
				}
			}
			i := next[k]
			if i >= limit || i > n {
				continue
			}
			if best < 0 || i < best || i == best && len(p) > len(s.pats[bestP].text) {
				best, bestP = i, k
			}
		}
		if best < 0 {
			return append(out, buf[v.at(start):v.at(limit)]...), v.at(limit), first
		}
		if first < 0 {
			first = bestP
		}
		out = append(out, buf[v.at(start):v.at(best)]...)
		out = append(out, s.pats[bestP].repl...)
		start = best + len(s.pats[bestP].text)
	}
}

// emitLimit is the first unit at or after from where a pattern begins
// that the decided units end before it is complete: the units from there
// on may yet be a secret and are held back; every pattern starting
// earlier is wholly there (or not there), so the text before is decided.
// With eof every unit is decided. Each pattern's longest unfinished start
// is found by running its Knuth-Morris-Pratt automaton over the last
// len(pattern)-1 units: the work is linear in the patterns' length, not
// quadratic, whatever the text.
func (s *Scrubber) emitLimit(v *view, n, from int, eof bool) int {
	limit := n
	if eof {
		return limit
	}
	for k := range s.pats {
		p := &s.pats[k]
		buf := v.of(p)
		q := 0
		for i := max(from, n-len(p.text)+1); i < n; i++ {
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
			limit = min(limit, n-q)
		}
	}
	return limit
}

// readSize is the most a scrubbing Reader asks of its source at once;
// minRead the first it asks: each read that fills what it asked doubles
// the next, so a small body costs a small buffer.
const (
	readSize = 32 << 10
	minRead  = 4 << 10
)

// reader is the read buffer of a stream: room makes space for the next
// read, grown tells it how much the last one filled.
type reader struct {
	next int
}

// room returns b with room for the next read after len(b): half the
// next read's size at least, so that the few bytes held back between
// reads do not cost a new buffer each time.
func (rd *reader) room(b []byte) []byte {
	if rd.next == 0 {
		rd.next = minRead
	}
	if cap(b)-len(b) >= rd.next/2 {
		return b
	}
	grown := make([]byte, len(b), len(b)+rd.next)
	copy(grown, b)
	return grown
}

// grown records that a read returned n bytes into room free bytes.
func (rd *reader) grown(n, room int) {
	if n == room && rd.next < readSize {
		rd.next *= 2
	}
}

// Reader returns r's bytes scrubbed. onEOF, if not nil, runs once when r
// ends cleanly, before the last bytes are returned (trailers are complete
// then). On a read error the bytes held back are dropped, not sent: they
// may begin a secret.
func (s *Scrubber) Reader(r io.Reader, onEOF func()) io.Reader {
	return s.chain(r, onEOF, false)
}

// chain is r read through every stage; onEOF runs at the last one's end.
func (s *Scrubber) chain(r io.Reader, onEOF func(), scanOnly bool) io.Reader {
	for st := s; st != nil; st = st.then {
		sr := &scrubReader{s: st, src: r, scanOnly: scanOnly}
		if st.then == nil {
			sr.onEOF = onEOF
		}
		r = sr
	}
	return r
}

type scrubReader struct {
	s     *Scrubber
	v     view
	src   io.Reader
	rd    reader
	in    []byte // read, not yet decided
	out   []byte // decided, not yet returned
	off   int
	err   error
	onEOF func()
	// scanOnly passes decided bytes unchanged and fails with
	// ErrSecretInBody where a secret would be replaced.
	scanOnly bool
	// boundary, if set, reports that the source's last read ended a unit
	// no secret spans (a gRPC message): all of it is decided then.
	boundary func() bool
	// bounded says the last decision was at such a boundary.
	bounded bool
	// found, if set, is given the name of the secret a scanOnly read
	// failed at.
	found *string
}

// drained reports that r has returned everything up to a boundary: the
// boundary of a stage reading r.
func (r *scrubReader) drained() bool { return r.bounded && r.off == len(r.out) }

func (r *scrubReader) Read(p []byte) (int, error) {
	for r.off == len(r.out) {
		if r.err != nil {
			return 0, r.err
		}
		r.out, r.off = r.out[:0], 0
		r.in = r.rd.room(r.in)
		n, err := r.src.Read(r.in[len(r.in):cap(r.in)])
		r.rd.grown(n, cap(r.in)-len(r.in))
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
			r.bounded = r.boundary != nil && r.boundary()
			err = r.decide(r.bounded)
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
	var used, hit int
	r.out, used, hit = r.s.process(r.in, eof, r.out, &r.v)
	if r.scanOnly && !bytes.Equal(r.out[start:], r.in[:used]) {
		r.out, r.in = r.out[:start], r.in[:0]
		if r.found != nil && hit >= 0 {
			*r.found = r.s.pats[hit].name
		}
		return ErrSecretInBody
	}
	r.in = r.in[:copy(r.in, r.in[used:])]
	return nil
}
