package proxy

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
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
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	if n > 0 {
		b.idle.Reset(b.timeout)
	}
	if err == io.EOF && b.trailer != nil {
		stripHopByHop(b.trailer)
	}
	return n, err
}

// responseBody writes the completion record when goproxy closes it after
// copying the response to the client.
type responseBody struct {
	countingBody
	f      *httpFlow
	status int
}

func (b *responseBody) Close() error {
	err := b.countingBody.Close()
	b.f.complete(b.status, "", "")
	return err
}

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
			return total, rerr
		}
	}
}
