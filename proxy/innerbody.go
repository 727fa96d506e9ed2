package proxy

import (
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// maxDrainBytes is how much of an inner h2 request's body the proxy
// reads and drops after its response, when nobody upstream read it all.
const maxDrainBytes = 4 << 20

// innerBody is the body of an h2 request inside an inspected tunnel, as
// the upstream side sees it: its Close (the transport closes a body the
// upstream stopped reading, an answer sent early) does not close the
// client's stream. Closing it there made the h2 server answer every DATA
// frame still on its way with RST_STREAM(STREAM_CLOSED), which curl
// reports as a stream error after a complete 200. drain ends the body
// once the response is out.
type innerBody struct {
	io.ReadCloser
	closed atomic.Bool
}

func (b *innerBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.ReadCloser.Read(p)
}

func (b *innerBody) Close() error {
	b.closed.Store(true)
	return nil
}

// drain reads what the client still sends, up to maxDrainBytes and for at
// most idle without a byte, so that its stream ends with its own
// END_STREAM; a longer or stalled upload is then reset (RST_STREAM
// NO_ERROR, as RFC 9113 §8.1 allows after a complete response).
func (b *innerBody) drain(idle time.Duration) {
	timer := time.AfterFunc(idle, func() { b.ReadCloser.Close() })
	defer timer.Stop()
	buf := make([]byte, 32<<10)
	for left := maxDrainBytes; left > 0; {
		n, err := b.ReadCloser.Read(buf[:min(len(buf), left)])
		left -= n
		if err != nil {
			break
		}
		timer.Reset(idle)
	}
	b.ReadCloser.Close()
}
