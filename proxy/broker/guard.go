package broker

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
)

// MaxWholeBody is the longest declared length of a body that is not
// rewritten (not text) that is read whole before the response head is
// passed on: a secret in it is refused with a 502 rather than cut once
// the client has its head.
const MaxWholeBody = 1 << 20

// gzipMagic opens every gzip stream, labelled or not.
var gzipMagic = []byte{0x1f, 0x8b}

// guard passes resp's body, which is not rewritten, only if it holds no
// secret: raw, and decompressed when it is labelled gzip or deflate or is
// gzip without a label.
func (s *Scrubber) guard(resp *http.Response, enc string, trailers func()) error {
	orig := resp.Body
	if resp.ContentLength >= 0 && resp.ContentLength <= MaxWholeBody {
		b, err := io.ReadAll(io.LimitReader(orig, MaxWholeBody+1))
		if err != nil {
			return fmt.Errorf("%w: reading the body to search it: %v", ErrUnscrubbable, err)
		}
		if s.holds(bytes.NewReader(b), "") || s.holds(bytes.NewReader(b), packed(b, enc)) {
			return ErrSecretInBody
		}
		trailers()
		resp.Body = readCloser{Reader: bytes.NewReader(b), Closer: orig}
		return nil
	}
	resp.Body = s.watch(orig, enc, isGRPC(resp.Header.Get("Content-Type")), trailers)
	return nil
}

// packed is the coding b is compressed in, as far as the scrubber can
// read it: the label's, or gzip for a stream that opens like one without
// a label. "" is none.
func packed(b []byte, enc string) string {
	switch enc {
	case "gzip", "x-gzip", "deflate":
		return enc
	case "", "identity":
		if bytes.HasPrefix(b, gzipMagic) {
			return "gzip"
		}
	}
	return ""
}

// holds reports whether r, decompressed in coding enc ("" none), holds a
// secret. What a broken or truncated stream yields before its error is
// searched too: a client may read that far.
func (s *Scrubber) holds(r io.Reader, enc string) bool {
	if enc != "" {
		r = &capReader{r: &decoder{src: r, enc: enc}, left: MaxDecompressedBytes}
	}
	_, err := io.Copy(io.Discard, s.scan(r, nil))
	return errors.Is(err, ErrSecretInBody)
}

// scan returns r's bytes unchanged, each once it is decided (as Reader
// holds back what may begin a secret), and fails with ErrSecretInBody at
// the first secret, which it never returns.
func (s *Scrubber) scan(r io.Reader, onEOF func()) io.Reader {
	return s.chain(r, onEOF, true)
}

// grpcFrames splits a gRPC body's reads at its message boundaries (a
// 5-byte prefix: flag, then the big-endian length) and says when a read
// ended one: no secret is looked for across messages, so a message is
// never held back waiting for the next one, which in a bidirectional
// stream may only come once the client has the whole of this one.
type grpcFrames struct {
	r    io.Reader
	head [5]byte
	nh   int    // bytes of head read
	left uint32 // bytes of the message still to read
	// ended is set by a read that completed a message.
	ended bool
}

func (g *grpcFrames) Read(p []byte) (int, error) {
	g.ended = false
	if g.nh < len(g.head) {
		n, err := g.r.Read(g.head[g.nh:min(len(g.head), g.nh+len(p))])
		copy(p, g.head[g.nh:g.nh+n])
		g.nh += n
		if g.nh == len(g.head) {
			g.left = uint32(g.head[1])<<24 | uint32(g.head[2])<<16 | uint32(g.head[3])<<8 | uint32(g.head[4])
			g.end()
		}
		return n, err
	}
	if uint32(len(p)) > g.left {
		p = p[:g.left]
	}
	n, err := g.r.Read(p)
	g.left -= uint32(n)
	g.end()
	return n, err
}

// end marks a completed message and starts the next head.
func (g *grpcFrames) end() {
	if g.nh == len(g.head) && g.left == 0 {
		g.nh, g.ended = 0, true
	}
}

func (g *grpcFrames) boundary() bool { return g.ended }

// isGRPC reports a gRPC content type: application/grpc and its +proto,
// +json kin.
func isGRPC(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == "application/grpc" || strings.HasPrefix(mt, "application/grpc+")
}

// watch is a streamed body that is not rewritten: its bytes pass as they
// are decided, and its read fails with ErrSecretInBody at a secret in the
// raw bytes or, when they are compressed (by label or a gzip opening),
// in the decompressed ones, which are searched alongside (see
// sideScan: bytes before a secret found there may have passed).
func (s *Scrubber) watch(orig io.ReadCloser, enc string, grpc bool, trailers func()) io.ReadCloser {
	return &watcher{s: s, br: bufio.NewReader(orig), orig: orig, enc: enc, grpc: grpc, trailers: trailers}
}

// watchText is an uncompressed textual body: scrubbed as it streams,
// unless it opens like gzip without saying so, which is searched as
// watch searches and never rewritten.
func (s *Scrubber) watchText(orig io.ReadCloser, trailers func()) io.ReadCloser {
	return &watcher{s: s, br: bufio.NewReader(orig), orig: orig, trailers: trailers, rewrite: true}
}

type watcher struct {
	s        *Scrubber
	br       *bufio.Reader
	orig     io.ReadCloser
	enc      string
	trailers func()
	// rewrite scrubs a body that is not compressed instead of searching it.
	rewrite bool
	// grpc searches an uncompressed body message by message.
	grpc bool
	r    io.Reader // set on the first read
	side *sideScan // nil when the body is not compressed
}

func (w *watcher) Read(p []byte) (int, error) {
	if w.r == nil {
		head, _ := w.br.Peek(len(gzipMagic))
		var src io.Reader = w.br
		enc := packed(head, w.enc)
		switch {
		case enc == "" && w.rewrite:
			w.r = w.s.Reader(w.br, w.trailers)
		default:
			var frames *grpcFrames
			switch {
			case enc != "":
				w.side = w.s.sideScan(enc)
				src = io.TeeReader(w.br, w.side)
			case w.grpc:
				frames = &grpcFrames{r: w.br}
				src = frames
			}
			w.r = w.s.scan(src, func() {
				w.side.end()
				w.trailers()
			})
			if frames != nil {
				// Each stage's boundary is the one its source reached.
				for r := w.r.(*scrubReader); r != nil; r, _ = r.src.(*scrubReader) {
					if prev, ok := r.src.(*scrubReader); ok {
						r.boundary = prev.drained
					} else {
						r.boundary = frames.boundary
					}
				}
			}
		}
	}
	n, err := w.r.Read(p)
	if w.side.found() {
		return 0, ErrSecretInBody
	}
	return n, err
}

func (w *watcher) Close() error {
	w.side.end()
	return w.orig.Close()
}

// sideScan searches a compressed copy of a stream for secrets as the
// stream is read: the stream's bytes are written to it, and a goroutine
// decompresses and scans them.
type sideScan struct {
	pw   *io.PipeWriter
	done chan struct{}
	hit  atomic.Bool
}

func (s *Scrubber) sideScan(enc string) *sideScan {
	pr, pw := io.Pipe()
	ss := &sideScan{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(ss.done)
		if s.holds(pr, enc) {
			ss.hit.Store(true)
		}
		// Whatever ended the search, writes end too.
		pr.CloseWithError(io.ErrClosedPipe)
	}()
	return ss
}

// Write hands p to the search; once the search has ended (a secret, or a
// stream that does not decompress) p is dropped.
func (ss *sideScan) Write(p []byte) (int, error) {
	_, _ = ss.pw.Write(p)
	return len(p), nil
}

// end says the stream is over and waits until the search has seen all of
// it.
func (ss *sideScan) end() {
	if ss == nil {
		return
	}
	ss.pw.Close() //nolint:errcheck // an io.PipeWriter's Close always returns nil
	<-ss.done
}

func (ss *sideScan) found() bool { return ss != nil && ss.hit.Load() }
