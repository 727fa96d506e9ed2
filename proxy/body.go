package proxy

import (
	"io"
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
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	if n > 0 {
		b.idle.Reset(b.timeout)
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
