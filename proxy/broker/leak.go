package broker

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/secretpat"
)

// Secrets leaving in requests: the response scrubber's matching, run over
// what a sandbox sends instead of what an upstream answers. A sandbox
// that found a brokered value must not be able to send it anywhere
// egressd sees, its own host included: a credential action puts the value
// in after this scan, which reads the request as the sandbox wrote it.

// LeakError says what a request carried: the loaded secret whose value it
// holds, or the patterns that refuse it. It names them, never quotes the
// bytes. The errors RequestScan returns are a *policy.DenyError
// (secret_in_request) wrapping one.
type LeakError struct {
	// Secret is the name of the loaded secret found; "" for patterns.
	Secret string
	// Patterns are the names of the patterns found, when they refuse.
	Patterns []string
	// Where is the part of the request: "target", "host", "header NAME"
	// or "body".
	Where string
}

func (e *LeakError) Error() string {
	if e.Secret != "" {
		return "the value of secret " + e.Secret + " in the request " + e.Where
	}
	return "secret pattern " + strings.Join(e.Patterns, ",") + " in the request " + e.Where
}

// deny is e as the one typed refusal.
func (e *LeakError) deny() error {
	return &policy.DenyError{Reason: policy.ReasonSecretInRequest, Err: e}
}

// Find returns the name of a loaded secret whose value v holds, in any
// form the response scrubber finds (escaped, case-folded, hex, base64),
// or "".
func (s *Secrets) Find(v string) string {
	if s == nil || s.scrub == nil {
		return ""
	}
	var vw view
	b := []byte(v)
	var out []byte
	for st := s.scrub; st != nil; st = st.then {
		var hit int
		if out, _, hit = st.process(b, true, out[:0], &vw); hit >= 0 {
			return st.pats[hit].name
		}
	}
	return ""
}

// RequestScan looks for secrets leaving in one request. The zero value
// looks for nothing.
type RequestScan struct {
	// Secrets are the loaded values, each of which refuses; nil is none.
	Secrets *Secrets
	// Patterns are the credential shapes looked for; nil is none.
	Patterns *secretpat.Set
	// RefusePatterns makes a pattern found refuse the request; otherwise
	// it is only reported, to be recorded.
	RefusePatterns bool
}

// Off reports that the scan looks for nothing: the request passes as it
// is, at no cost.
func (c *RequestScan) Off() bool { return c.Secrets.Len() == 0 && c.Patterns == nil }

// Head checks the request head as the sandbox sent it: the request target
// (its raw bytes; the scrubber's views decode percent escapes, and
// patterns are also looked for percent-decoded), the Host, and every
// header's name and values. Proxy-Authorization is egressd's own
// credential, never sent upstream, and is not looked at. It returns the
// patterns found to be recorded, or a refusal (see LeakError).
func (c *RequestScan) Head(target, host string, h http.Header) ([]string, error) {
	var found secretpat.Found
	check := func(v, where string, name bool) error {
		if sec := c.Secrets.Find(v); sec != "" {
			return (&LeakError{Secret: sec, Where: where}).deny()
		}
		f := c.Patterns.FindString(v)
		if !name && strings.IndexByte(v, '%') >= 0 {
			f |= c.Patterns.FindString(percentDecoded(v))
		}
		if f != 0 && c.RefusePatterns {
			return (&LeakError{Patterns: c.Patterns.Names(f), Where: where}).deny()
		}
		found |= f
		return nil
	}
	if err := check(target, "target", false); err != nil {
		return nil, err
	}
	if err := check(host, "host", false); err != nil {
		return nil, err
	}
	for name, vs := range h {
		if name == "Proxy-Authorization" {
			continue
		}
		where := "header " + name
		if err := check(name, where, true); err != nil {
			return nil, err
		}
		for _, v := range vs {
			if err := check(v, where, false); err != nil {
				return nil, err
			}
		}
	}
	return c.Patterns.Names(found), nil
}

// percentDecoded is v with every valid %XX decoded and the rest kept.
func percentDecoded(v string) string {
	b := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		if v[i] == '%' && i+2 < len(v) && hexVal(v[i+1]) >= 0 && hexVal(v[i+2]) >= 0 {
			b = append(b, byte(hexVal(v[i+1])<<4|hexVal(v[i+2])))
			i += 2
			continue
		}
		b = append(b, v[i])
	}
	return string(b)
}

// Body returns the request body as the upstream may read it. Its bytes
// pass unchanged once decided; a read fails (a *policy.DenyError wrapping
// a *LeakError) at the first loaded secret, or pattern when they refuse,
// and the bytes of what was found never pass: each search holds back
// what may begin a match (as the response scrubber does), so the
// upstream, whose transport stops at the failed read, never receives a
// complete request. A body in gzip or deflate (its Content-Encoding, or
// a gzip opening without one) is searched decompressed too, up to
// MaxDecompressedBytes, alongside the raw bytes, on a goroutine that runs
// behind the stream; its last byte is held until that search has seen
// the end. Other codings are searched raw only.
//
// Only a compressed body is held back when nothing in it may begin a
// match: an upstream that answers and closes without reading a body
// (Connection: close) is then written the body in one piece, as without
// the search, rather than a last byte its closed socket refuses.
func (c *RequestScan) Body(body io.ReadCloser, contentEncoding string) *BodyScan {
	return &BodyScan{c: *c, src: body, enc: strings.ToLower(strings.TrimSpace(contentEncoding))}
}

// BodyScan is a request body being searched (RequestScan.Body).
type BodyScan struct {
	c   RequestScan
	src io.ReadCloser
	enc string
	r   io.Reader // the raw search, set on the first read
	m   *secretpat.Matcher
	// secret is set by the raw search when it fails at a secret.
	secret string
	// side is the decompressed search; nil when not compressed. Set
	// under mu.
	side  *leakSide
	rd    reader
	buf   []byte
	off   int // buf[:off] was returned
	ready int // buf[off:ready] is decided
	err   error

	mu       sync.Mutex
	found    secretpat.Found // raw patterns so far; the side's at its end
	sideSeen secretpat.Found
	leak     *LeakError
}

func (b *BodyScan) open() {
	br := bufio.NewReader(b.src)
	head, _ := br.Peek(len(gzipMagic))
	var src io.Reader = br
	if enc := packed(head, b.enc); enc != "" {
		side := b.c.newLeakSide(enc)
		src = io.TeeReader(br, side)
		// Close may run on another goroutine.
		b.mu.Lock()
		b.side = side
		b.mu.Unlock()
	}
	b.m = b.c.Patterns.NewMatcher()
	b.r = src
	if sc := b.c.Secrets.scrubber(); sc != nil {
		b.r = sc.scanNamed(src, &b.secret)
	}
}

func (b *BodyScan) Read(p []byte) (int, error) {
	if b.r == nil {
		b.open()
	}
	for b.off == b.ready {
		if b.err != nil {
			return 0, b.err
		}
		b.buf = b.buf[:copy(b.buf, b.buf[b.off:])]
		b.ready -= b.off
		b.off = 0
		b.buf = b.rd.room(b.buf)
		n, err := b.r.Read(b.buf[len(b.buf):cap(b.buf)])
		b.rd.grown(n, cap(b.buf)-len(b.buf))
		read := b.buf[len(b.buf) : len(b.buf)+n]
		b.buf = b.buf[:len(b.buf)+n]
		if b.m != nil {
			_, _ = b.m.Write(read) // a Matcher never fails a write
			b.mu.Lock()
			b.found = b.m.Found()
			b.mu.Unlock()
			if b.found != 0 && b.c.RefusePatterns {
				b.fail(&LeakError{Patterns: b.c.Patterns.Names(b.found), Where: "body"})
				continue
			}
		}
		if b.side.hit() {
			b.fail(b.endSide())
			continue
		}
		switch {
		case err == io.EOF:
			if leak := b.endSide(); leak != nil {
				b.fail(leak)
				continue
			}
			b.ready, b.err = len(b.buf), io.EOF
		case errors.Is(err, ErrSecretInBody):
			b.fail(&LeakError{Secret: b.secret, Where: "body"})
		case err != nil:
			// What is held back may begin a secret: dropped.
			b.err = err
		default:
			hold := b.m.Pending()
			if b.side != nil {
				// The decompressed search runs behind: until it has seen
				// the end, the upstream must not have the whole body.
				hold = max(hold, 1)
			}
			b.ready = max(b.ready, len(b.buf)-hold)
		}
	}
	n := copy(p, b.buf[b.off:b.ready])
	b.off += n
	return n, nil
}

// fail ends the body at a leak: nothing more is returned.
func (b *BodyScan) fail(l *LeakError) {
	b.mu.Lock()
	b.leak = l
	b.mu.Unlock()
	b.err = l.deny()
}

// endSide ends the decompressed search and takes its patterns.
func (b *BodyScan) endSide() *LeakError {
	leak := b.side.end()
	if b.side != nil {
		b.mu.Lock()
		b.sideSeen = b.side.found
		b.mu.Unlock()
	}
	return leak
}

// Close ends the decompressed search and closes the client's body. It
// may run while a Read is under way.
func (b *BodyScan) Close() error {
	b.mu.Lock()
	side := b.side
	b.mu.Unlock()
	_ = side.end() // Findings reports what it found
	return b.src.Close()
}

// Findings are what the body was found to hold so far: the secret or
// refused patterns that ended it (leak, nil if none) and the names of
// every pattern found. Safe to call while the body is read.
func (b *BodyScan) Findings() (leak *LeakError, patterns []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.leak, b.c.Patterns.Names(b.found | b.sideSeen)
}

// leakSide searches a compressed copy of a request body, decompressed, as
// the body is read: its bytes are written to it, and a goroutine
// decompresses and searches them.
type leakSide struct {
	c    *RequestScan
	pw   *io.PipeWriter
	done chan struct{}
	// stop is set once the search found what refuses the request.
	stop atomic.Bool
	once sync.Once
	// Set by the goroutine, read after done.
	leak  *LeakError
	found secretpat.Found
}

func (c *RequestScan) newLeakSide(enc string) *leakSide {
	pr, pw := io.Pipe()
	ls := &leakSide{c: c, pw: pw, done: make(chan struct{})}
	go func() {
		defer close(ls.done)
		ls.search(&capReader{r: &decoder{src: pr, enc: enc}, left: MaxDecompressedBytes})
		// Whatever ended the search, writes end too.
		pr.CloseWithError(io.ErrClosedPipe)
	}()
	return ls
}

// search reads the decompressed body to its end, or to what refuses it.
// A stream that does not decompress, or decompresses past the cap, is
// searched as far as it goes: the upstream cannot read further either.
func (ls *leakSide) search(r io.Reader) {
	var secret string
	if sc := ls.c.Secrets.scrubber(); sc != nil {
		r = sc.scanNamed(r, &secret)
	}
	m := ls.c.Patterns.NewMatcher()
	buf := make([]byte, readSize)
	for {
		n, err := r.Read(buf)
		if m != nil {
			_, _ = m.Write(buf[:n]) // a Matcher never fails a write
			ls.found = m.Found()
			if ls.found != 0 && ls.c.RefusePatterns {
				ls.leak = &LeakError{Patterns: ls.c.Patterns.Names(ls.found), Where: "body (decompressed)"}
				ls.stop.Store(true)
				return
			}
		}
		if errors.Is(err, ErrSecretInBody) {
			ls.leak = &LeakError{Secret: secret, Where: "body (decompressed)"}
			ls.stop.Store(true)
			return
		}
		if err != nil {
			return
		}
	}
}

// Write hands p to the search; once the search has ended p is dropped.
func (ls *leakSide) Write(p []byte) (int, error) {
	_, _ = ls.pw.Write(p)
	return len(p), nil
}

// hit reports that the search found what refuses the request.
func (ls *leakSide) hit() bool { return ls != nil && ls.stop.Load() }

// end says the body is over, waits until the search has seen all of it
// and returns what refuses the request, if anything.
func (ls *leakSide) end() *LeakError {
	if ls == nil {
		return nil
	}
	ls.once.Do(func() {
		ls.pw.Close() //nolint:errcheck // an io.PipeWriter's Close always returns nil
		<-ls.done
	})
	return ls.leak
}

// Scrubber is the scrubber of every loaded value, for the records of a
// request that carried one; nil when none is loaded.
func (s *Secrets) Scrubber() *Scrubber { return s.scrubber() }

// scrubber is the scrubber of every loaded value; nil when none.
func (s *Secrets) scrubber() *Scrubber {
	if s == nil {
		return nil
	}
	return s.scrub
}

// scanNamed is scan, telling found the name of the secret it fails at.
func (s *Scrubber) scanNamed(r io.Reader, found *string) io.Reader {
	out := s.chain(r, nil, true)
	for sr, ok := out.(*scrubReader); ok; sr, ok = sr.src.(*scrubReader) {
		sr.found = found
	}
	return out
}
