package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/broker"
)

// countingBody counts bytes and pushes back the flow's idle timer on every
// read, so a stalled body in either direction ends the request.
type countingBody struct {
	io.ReadCloser
	n       atomic.Int64
	idle    *time.Timer
	timeout time.Duration
	// trailer, if not nil, is the request's trailer map: net/http fills it
	// when the body ends and the Transport sends it after the last read, so
	// hop-by-hop names are stripped at EOF, in between.
	trailer http.Header
	// limit, when positive, is the most bytes the body may carry (a rule's
	// max_request_bytes): the read that would cross it returns only what
	// fits and fails, so the upstream never receives past the limit, and
	// the failed read stops the transport before it ends the body (no
	// last chunk, a reset h2 stream): no truncated body reads as whole.
	limit int64
	// cut is the refusal that stopped the body mid-stream, read by the
	// flow once the transport gave up on it.
	cut atomic.Pointer[bodyCut]
}

// bodyCut is why a request body was stopped mid-stream.
type bodyCut struct {
	reason policy.Reason
	detail string
}

func (c *bodyCut) Error() string { return c.reason.String() + ": " + c.detail }

func (b *countingBody) Read(p []byte) (int, error) {
	if b.limit > 0 {
		left := b.limit - b.n.Load()
		if int64(len(p)) > left+1 {
			// One byte past the limit is enough to know it is crossed.
			p = p[:left+1]
		}
	}
	n, err := b.ReadCloser.Read(p)
	if b.limit > 0 && b.n.Load()+int64(n) > b.limit {
		n = int(b.limit - b.n.Load())
		c := &bodyCut{reason: policy.ReasonBodyTooLarge, detail: fmt.Sprintf("request body crossed max_request_bytes (%d) while it streamed", b.limit)}
		b.cut.Store(c)
		b.n.Add(int64(n))
		return n, c
	}
	b.n.Add(int64(n))
	if n > 0 {
		b.idle.Reset(b.timeout)
	}
	if err == io.EOF && b.trailer != nil {
		stripHopByHop(b.trailer)
	}
	return n, err
}

// completeClientClosed completes a request the client hung up on; when says at
// which stage, for the metric. client_closed is the completion error, not a
// reason: nothing was refused. A request a drain cut at its deadline is
// recorded so (shutting_down), not as its client's doing.
func (f *httpFlow) completeClientClosed(when string) {
	reason, detail := f.s.cutReason()
	if reason == "" {
		f.s.metrics.clientClosed.WithLabelValues(when).Inc()
	}
	f.complete(0, reason, detail)
}

// responseBody writes the completion record when goproxy closes it after
// copying the response to the client.
type responseBody struct {
	countingBody
	f      *httpFlow
	status int
	// cut is the error that ended the copy before the upstream's EOF.
	// Guarded by mu: goproxy's WebSocket relay copies the body on a
	// goroutine of its own while its handler closes it.
	mu  sync.Mutex
	cut error
}

func (b *responseBody) setCut(err error) {
	b.mu.Lock()
	b.cut = err
	b.mu.Unlock()
}

func (b *responseBody) cutErr() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cut
}

// Close completes the request: a copy that ended early is recorded as cut
// short, by the client or by the upstream, never as a clean response.
func (b *responseBody) Close() error {
	err := b.countingBody.Close()
	if b.f.completed {
		// goproxy closes the body twice; the request is complete.
		return err
	}
	cut := b.cutErr()
	switch {
	case cut == nil:
		b.f.complete(b.status, "", "")
	case b.f.clientCtx.Err() != nil || errors.Is(cut, errClientWrite):
		reason, detail := b.f.s.cutReason()
		if reason == "" {
			b.f.s.metrics.clientClosed.WithLabelValues("response").Inc()
		}
		b.f.complete(b.status, reason, detail)
	case errors.Is(cut, broker.ErrSecretInBody):
		// Cut at a secret in a body that is not rewritten: a refusal,
		// after the head had gone.
		b.f.complete(b.status, policy.ReasonCredentialUnscrubbable, "response cut short: "+cut.Error())
	default:
		detail := "response cut short: " + cut.Error()
		var idle *bodyIdleError
		if errors.As(context.Cause(b.f.upCtx), &idle) {
			// The pool's connection read fails with the close the
			// cancel caused; the cause says why.
			detail = idle.Error()
		}
		b.f.complete(b.status, "", detail)
	}
	return err
}

// errClientWrite marks a failed write to the client.
var errClientWrite = errors.New("write to client")

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// WriteTo copies the body to the client. goproxy's io.Copy would otherwise
// take the ResponseWriter's ReadFrom path, which writes the head and the
// first body bytes in separate syscalls; here a small body leaves with its
// head in one write, and every read that drained the upstream for now is
// flushed so slow streams are not held back.
func (b *responseBody) WriteTo(w io.Writer) (int64, error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	f, _ := w.(http.Flusher)
	var total int64
	for {
		n, rerr := b.Read(buf)
		if n > 0 {
			m, werr := w.Write(buf[:n])
			total += int64(m)
			if werr != nil {
				b.setCut(fmt.Errorf("%w: %w", errClientWrite, werr))
				return total, werr
			}
			if n < len(buf) && f != nil && rerr == nil {
				f.Flush()
			}
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			b.setCut(rerr)
			return total, rerr
		}
	}
}

// checkSize refuses, before anything goes upstream, a request whose
// declared length is over its rule's max_request_bytes, and bounds a body
// of unknown length as it streams (countingBody.limit).
func (f *httpFlow) checkSize(r *http.Request, d *policy.Decision) (refusal, bool) {
	o := d.Options
	if o == nil || o.MaxRequestBytes == 0 {
		return refusal{}, false
	}
	size, what := r.ContentLength, "Content-Length"
	if f.readBytes > size {
		// Read whole to decide on it: its length is known.
		size, what = f.readBytes, "the body read to decide on it"
	}
	if size > o.MaxRequestBytes {
		rf := deniedRefusal(policy.ReasonBodyTooLarge)
		rf.Rule, rf.Policy = d.Rule, d.Policy
		rf.detail = fmt.Sprintf("%s (%d bytes) is over max_request_bytes (%d)", what, size, o.MaxRequestBytes)
		return rf, true
	}
	f.sent.limit = o.MaxRequestBytes
	return refusal{}, false
}

// hasBody reports a request that has a body: net/http's h2 server gives
// every request a Body, the END_STREAM GET too (with ContentLength 0), and
// a body decides how the request travels upstream (tlsUpstream.roundTrip).
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

// keptBody keeps what the policy reads of a request body to decide on it,
// so that exactly those bytes are sent upstream.
type keptBody struct {
	r    io.Reader
	buf  bytes.Buffer
	read bool
}

func (k *keptBody) Read(p []byte) (int, error) {
	k.read = true
	n, err := k.r.Read(p)
	k.buf.Write(p[:n])
	return n, err
}

// replay is the body to send: the bytes read, then the rest of orig.
func (k *keptBody) replay(orig io.ReadCloser) io.ReadCloser {
	return readCloser{Reader: io.MultiReader(bytes.NewReader(k.buf.Bytes()), orig), Closer: orig}
}

// readCloser is a Reader closed through another value.
type readCloser struct {
	io.Reader
	io.Closer
}
