package broker

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
)

// MaxDecompressedBytes caps a compressed textual body that is decompressed
// to be scrubbed: past it the body is cut (the client sees it end early)
// rather than the proxy inflating a decompression bomb without end.
const MaxDecompressedBytes = 64 << 20

// ErrUnscrubbable refuses a response whose textual body is in an encoding
// the scrubber cannot read (br, zstd, a chain of codings).
var ErrUnscrubbable = errors.New("textual response body in an encoding egressd cannot scrub")

// ErrSecretInBody refuses (or cuts) a response whose body is not rewritten
// (not text) yet holds a secret: bytes of a type the scrubber does not
// read are never changed, only passed or refused.
var ErrSecretInBody = errors.New("response body of a type that is not rewritten holds a secret")

// errOverCap ends a decompressed body past MaxDecompressedBytes.
var errOverCap = fmt.Errorf("decompressed response body over %d bytes", MaxDecompressedBytes)

// Scrubber returns the scrubber of this request's response, for anything
// else the upstream's answer reaches (the records of the request); nil
// when there is no secret.
func (p *Plan) Scrubber() *Scrubber {
	if p.sc == nil {
		p.sc = p.scrubber()
	}
	return p.sc
}

// scrubber returns the scrubber for this request's response: every loaded
// secret (an upstream of one rule may have learnt another's secret: the
// set is small and the cost is per pattern) and the Basic tokens this
// request carries.
func (p *Plan) scrubber() *Scrubber {
	var extra []pattern
	for i := range p.actions {
		a := &p.actions[i]
		if p.apply[i] && a.Basic != nil {
			v, _ := p.secrets.Value(a.Secret)
			extra = append(extra, pattern{text: []byte(basicToken(a.Basic.User, v)), repl: redacted(a.Secret), name: a.Secret})
		}
	}
	if p.secrets == nil {
		return newScrubber(extra)
	}
	if len(extra) == 0 {
		return p.secrets.scrub
	}
	return newScrubber(append(append(make([]pattern, 0, len(p.secrets.patterns)+len(extra)), p.secrets.patterns...), extra...))
}

// Scrub removes secret values from resp: its headers now, and a textual
// body (and every body's trailers) as the body is read. A compressed
// textual body is decompressed (gzip, deflate; at most
// MaxDecompressedBytes) and passed on uncompressed; in any other encoding
// ErrUnscrubbable is returned and resp must not reach the client. A body
// of any other type (images, archives, protobuf, message/http) is not
// rewritten but searched, decompressed too when it is gzip, labelled or
// not: one of a declared length up to MaxWholeBody is read whole first, so
// a secret in it is ErrSecretInBody before the head is passed on; a longer
// or streamed one is cut at the secret (its read fails with
// ErrSecretInBody). A response with more than one Content-Type is
// ErrUnscrubbable: which one a client obeys is its own choice. The
// connection behind a 101 (WebSocket) passes untouched.
func (p *Plan) Scrub(resp *http.Response) error {
	sc := p.Scrubber()
	if sc == nil {
		return nil
	}
	scrubHeader(sc, resp.Header)
	if len(resp.Header.Values("Content-Type")) > 1 {
		return fmt.Errorf("%w: more than one Content-Type", ErrUnscrubbable)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// The body is the upgraded connection (WebSocket frames): out of
		// scope, passed as it is.
		return nil
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	enc := strings.ToLower(strings.TrimSpace(strings.Join(resp.Header.Values("Content-Encoding"), ",")))
	switch enc {
	case "", "identity", "gzip", "x-gzip", "deflate":
	default:
		return fmt.Errorf("%w: %q", ErrUnscrubbable, enc)
	}
	trailers := func() { scrubHeader(sc, resp.Trailer) }
	if !Textual(resp.Header.Get("Content-Type")) {
		return sc.guard(resp, enc, trailers)
	}
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	orig := resp.Body
	if enc == "" || enc == "identity" {
		resp.Body = sc.watchText(orig, trailers)
		return nil
	}
	body := &capReader{r: &decoder{src: orig, enc: enc}, left: MaxDecompressedBytes}
	resp.Header.Del("Content-Encoding")
	resp.Body = readCloser{Reader: sc.Reader(body, trailers), Closer: orig}
	return nil
}

func scrubHeader(sc *Scrubber, h http.Header) {
	for _, vs := range h {
		for i, v := range vs {
			vs[i] = sc.String(v)
		}
	}
}

type readCloser struct {
	io.Reader
	io.Closer
}

// Textual reports a media type whose body is scrubbed: text/*, JSON, XML,
// JavaScript, form data, and a missing or unreadable type (which may be
// any of them).
func Textual(contentType string) bool {
	if contentType == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return true
	}
	switch {
	case strings.HasPrefix(mt, "text/"),
		strings.HasSuffix(mt, "+json"), strings.HasSuffix(mt, "+xml"),
		strings.HasSuffix(mt, "/json"), strings.HasSuffix(mt, "/xml"),
		strings.HasSuffix(mt, "/javascript"), strings.HasSuffix(mt, "/ecmascript"),
		strings.HasSuffix(mt, "/x-javascript"), strings.HasSuffix(mt, "/x-ndjson"),
		strings.HasSuffix(mt, "/jsonl"), mt == "application/x-www-form-urlencoded",
		mt == "application/graphql", mt == "application/x-yaml", mt == "application/yaml":
		return true
	}
	return false
}

// decoder decompresses on first read, so that reading a header does not
// wait for the body.
type decoder struct {
	src io.Reader
	enc string
	r   io.Reader
	err error
}

func (d *decoder) Read(p []byte) (int, error) {
	if d.r == nil && d.err == nil {
		d.r, d.err = d.open()
	}
	if d.err != nil {
		return 0, d.err
	}
	return d.r.Read(p)
}

func (d *decoder) open() (io.Reader, error) {
	if d.enc != "deflate" {
		zr, err := gzip.NewReader(d.src)
		if err != nil {
			return nil, fmt.Errorf("gzip response body: %w", err)
		}
		return zr, nil
	}
	// "deflate" is zlib by the RFC; some servers send raw deflate. A zlib
	// stream opens with a header whose 16 bits are a multiple of 31.
	br := bufio.NewReader(d.src)
	h, err := br.Peek(2)
	if err == nil && h[0]&0x0f == 8 && (uint16(h[0])<<8|uint16(h[1]))%31 == 0 {
		zr, err := zlib.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("deflate response body: %w", err)
		}
		return zr, nil
	}
	return flate.NewReader(br), nil
}

// capReader fails once more than left bytes were read.
type capReader struct {
	r    io.Reader
	left int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		var one [1]byte
		if n, err := c.r.Read(one[:]); n > 0 {
			return 0, errOverCap
		} else if err != nil {
			return 0, err
		}
		return 0, nil
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}
