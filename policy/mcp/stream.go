package mcp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
)

// ErrStreamClosed is Inject's error once the stream has ended or been
// closed: the refusal has no stream to travel on.
var ErrStreamClosed = errors.New("MCP event stream closed")

// injectQueue bounds the refusals waiting for Read: a client that sends
// more refused calls than this without reading its stream gets errors.
const injectQueue = 64

// Stream is the GET event stream of an HTTP+SSE transport session, filtered
// as FilterSSE does, into which the proxy can put events of its own: that
// transport answers every POST on this stream, so the refusal of a
// tools/call must travel here (Inject) while its POST is answered 202
// Accepted.
//
// A goroutine reads the server's stream, so an injected event goes out at
// once even while the server sends nothing; injected events go out between
// two of the server's events, never inside one. Close ends the goroutine.
type Stream struct {
	events chan []byte // the server's filtered events, in order
	inject chan []byte // injected events, in order
	done   chan struct{}
	body   io.Closer

	closeOnce sync.Once
	mu        sync.Mutex
	endpoint  string // the first "endpoint" event's data
	err       error  // why the server's stream ended, once events is closed

	cur []byte // the rest of the event Read is handing out
}

// NewStream starts filtering body, the HTTP+SSE transport's GET stream.
func NewStream(body io.ReadCloser, allow func(tool string) bool) *Stream {
	s := &Stream{
		events: make(chan []byte),
		inject: make(chan []byte, injectQueue),
		done:   make(chan struct{}),
		body:   body,
	}
	f := newSSEFilter(body, allow)
	f.onEvent = func(typ string, data []byte) {
		if typ != endpointEvent {
			return
		}
		s.mu.Lock()
		if s.endpoint == "" {
			s.endpoint = string(data)
		}
		s.mu.Unlock()
	}
	go s.pump(f)
	return s
}

// pump hands the filter's events to Read one by one.
func (s *Stream) pump(f *sseFilter) {
	defer close(s.events)
	for {
		ev, err := f.next()
		if len(ev) > 0 {
			select {
			case s.events <- bytes.Clone(ev):
			case <-s.done:
				return
			}
		}
		if err != nil {
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
			return
		}
	}
}

// Read hands out the stream: the server's events, filtered, and the
// injected ones. It returns the server stream's end (io.EOF, or an error
// wrapping ErrAnswer) once its last event has been read.
func (s *Stream) Read(p []byte) (int, error) {
	if len(s.cur) == 0 {
		select {
		case ev := <-s.inject:
			s.cur = ev
		default:
			select {
			case ev := <-s.inject:
				s.cur = ev
			case ev, ok := <-s.events:
				if !ok {
					s.mu.Lock()
					defer s.mu.Unlock()
					if s.err == nil { // pump stopped by Close
						return 0, ErrStreamClosed
					}
					return 0, s.err
				}
				s.cur = ev
			}
		}
	}
	n := copy(p, s.cur)
	s.cur = s.cur[n:]
	return n, nil
}

// Inject queues msg, one JSON-RPC message (ErrorBody's body), as a
// "message" event. It fails with ErrStreamClosed after Close, and with
// another error when the client has not read the last 64 injected events:
// either way the proxy answers the POST itself (ErrorBody's status), which
// the SDK's client takes as a failed session.
func (s *Stream) Inject(msg []byte) error {
	select {
	case <-s.done:
		return ErrStreamClosed
	default:
	}
	ev := make([]byte, 0, len(msg)+32)
	ev = append(ev, "event: message\n"...)
	for line := range bytes.SplitSeq(msg, []byte{'\n'}) {
		ev = append(append(append(ev, "data: "...), bytes.TrimSuffix(line, []byte{'\r'})...), '\n')
	}
	ev = append(ev, '\n')
	select {
	case s.inject <- ev:
		return nil
	default:
		return fmt.Errorf("inject into MCP event stream: %d events already wait", injectQueue)
	}
}

// Endpoint is the data of the stream's first "endpoint" event, the URL
// (usually relative to the GET's) the client POSTs to: the proxy keys its
// sessions by it to find the stream a refusal belongs on. It is "" until
// that event has been read from the server.
func (s *Stream) Endpoint() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.endpoint
}

// Close stops reading the server's stream and closes its body.
func (s *Stream) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.done)
		err = s.body.Close()
	})
	return err
}
