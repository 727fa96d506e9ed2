package llm

import (
	"bytes"
	"io"
	"sync"
)

// UsageSSE passes a streamed answer of api's endpoint through unchanged,
// as it is read, and calls done once, with the usage the stream reported,
// when reading it ends (EOF or an error). If r is an io.Closer so is the
// reader returned: Close closes r and calls done if reading had not ended,
// for an answer the client stopped reading.
//
// The stream is framed as server-sent events are (lines end in CR, LF or
// CRLF; "data:" lines joined; a blank line ends an event; a leading BOM
// dropped), in memory bounded by twice MaxEventBytes whatever the
// chunking. It reads what the official SDKs read: OpenAI's last usage
// chunk (chat completions and completions, when asked with
// include_usage), a responses stream's response.usage (response.completed,
// .incomplete or .failed); Anthropic's message_start usage updated by
// message_delta's. Like the SDKs it stops at OpenAI's [DONE], at an error
// event, or at an event that is not JSON: usage after them is not read. A
// stream that ends without its final usage is Found false. An event over
// MaxEventBytes is passed on but not read.
//
// Choose UsageSSE or UsageJSON by the answer's Content-Type
// (text/event-stream), not by Request.Stream: what the client reads is
// what is metered.
func UsageSSE(api, endpoint string, r io.Reader, done func(Usage)) io.Reader {
	s := &sseReader{r: r, done: done, first: true, acc: usageStream{api: api, endpoint: endpoint}}
	if c, ok := r.(io.Closer); ok {
		return &sseReadCloser{sseReader: s, c: c}
	}
	return s
}

type sseReader struct {
	r    io.Reader
	done func(Usage)
	once sync.Once

	// mu guards what follows: Close may run while a Read parses.
	mu sync.Mutex
	// line holds the line being read; lineOver is set when it passed
	// MaxEventBytes, and over when the event's data or one of its lines
	// did: such an event is not parsed.
	line     []byte
	lineOver bool
	over     bool
	afterCR  bool // the last byte was CR: an LF next ends no line
	first    bool // the first line, whose BOM is dropped
	event    []byte
	data     []byte
	hasData  bool
	acc      usageStream
}

func (s *sseReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.mu.Lock()
	if !s.acc.stopped {
		s.feed(p[:n])
	}
	s.mu.Unlock()
	if err != nil {
		s.finish()
	}
	return n, err
}

// finish calls done once with the usage seen.
func (s *sseReader) finish() {
	s.once.Do(func() {
		s.mu.Lock()
		u := s.acc.usage()
		s.mu.Unlock()
		s.done(u)
	})
}

type sseReadCloser struct {
	*sseReader
	c io.Closer
}

func (s *sseReadCloser) Close() error {
	err := s.c.Close()
	s.finish()
	return err
}

// feed frames p into lines and events.
func (s *sseReader) feed(p []byte) {
	for len(p) > 0 {
		if s.afterCR {
			s.afterCR = false
			if p[0] == '\n' {
				p = p[1:]
				continue
			}
		}
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			s.appendLine(p)
			return
		}
		s.appendLine(p[:i])
		s.afterCR = p[i] == '\r'
		p = p[i+1:]
		s.endLine()
		if s.acc.stopped {
			return
		}
	}
}

func (s *sseReader) appendLine(b []byte) {
	if s.lineOver {
		return
	}
	if len(s.line)+len(b) > MaxEventBytes {
		s.lineOver = true
		s.line = s.line[:0]
		return
	}
	s.line = append(s.line, b...)
}

// endLine interprets one line.
func (s *sseReader) endLine() {
	line := s.line
	s.line = s.line[:0]
	if cap(s.line) > 64<<10 {
		// Do not keep a long line's buffer for the stream's life.
		s.line = nil
	}
	if s.lineOver {
		s.lineOver, s.first, s.over = false, false, true
		return
	}
	if s.first {
		s.first = false
		line = bytes.TrimPrefix(line, []byte("\ufeff"))
	}
	switch {
	case len(line) == 0:
		s.dispatch()
		return
	case line[0] == ':' || s.over:
		return
	}
	name, value, _ := bytes.Cut(line, []byte(":"))
	value = bytes.TrimPrefix(value, []byte(" "))
	switch string(name) {
	case "event":
		s.event = append(s.event[:0], value...)
	case "data":
		if len(s.data)+len(value)+1 > MaxEventBytes {
			s.over = true
			return
		}
		if s.hasData {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, value...)
		s.hasData = true
	}
}

// dispatch ends an event.
func (s *sseReader) dispatch() {
	if s.hasData && !s.over {
		s.acc.event(string(s.event), s.data)
	}
	s.event, s.data, s.hasData, s.over = s.event[:0], s.data[:0], false, false
	if cap(s.data) > 64<<10 {
		// Do not keep a large event's buffer for the stream's life.
		s.data = nil
	}
}

// usageStream accumulates usage over a stream's events.
type usageStream struct {
	api, endpoint string
	u             Usage // OpenAI's, last seen
	a             anthropicUsage
	sawDelta      bool // Anthropic: a message_delta's usage was read
	// stopped: the SDK would read no further (OpenAI's [DONE], an error
	// event, an event that is not JSON).
	stopped bool
}

func (st *usageStream) usage() Usage {
	if st.api == APIAnthropic {
		return st.a.usage(st.sawDelta)
	}
	return st.u
}

// event reads one event of type typ ("" when it named none).
func (st *usageStream) event(typ string, data []byte) {
	if st.api == APIAnthropic {
		st.anthropic(typ, data)
		return
	}
	if bytes.HasPrefix(data, []byte("[DONE]")) {
		st.stopped = true
		return
	}
	if isNull(data) {
		return // decodes, as nothing
	}
	if !isObject(data) {
		st.stopped = true
		return
	}
	if _, isErr := member(data, "error"); isErr {
		st.stopped = true
		return
	}
	raw, _ := member(data, "usage")
	if st.endpoint == EndpointResponses {
		resp, _ := member(data, "response")
		if !startsObject(resp) {
			return
		}
		raw, _ = member(resp, "usage")
	}
	if u, found := openAIUsage(st.endpoint, raw); found {
		st.u = u
	}
}

// startsObject: raw, a member of a valid document, is an object.
func startsObject(raw []byte) bool {
	return len(raw) > 0 && raw[0] == '{'
}

// isNull: the SDKs decode a JSON null into an event without error, and
// go on.
func isNull(data []byte) bool {
	return string(bytes.TrimSpace(data)) == "null"
}

// anthropic reads an Anthropic event as the SDK does: events with no type
// and pings are skipped, an error ends the stream, and the rest are
// dispatched on their data's "type".
func (st *usageStream) anthropic(typ string, data []byte) {
	switch typ {
	case "", "ping":
		return
	case "error":
		st.stopped = true
		return
	}
	if len(data) == 0 || isNull(data) {
		return
	}
	if !isObject(data) {
		st.stopped = true
		return
	}
	kind, _ := member(data, "type")
	switch {
	case keyIs(kind, "message_start"):
		msg, _ := member(data, "message")
		if !startsObject(msg) {
			st.a.bad = true
			return
		}
		usage, _ := member(msg, "usage")
		st.a.message(usage)
	case keyIs(kind, "message_delta"):
		usage, _ := member(data, "usage")
		st.a.delta(usage)
		st.sawDelta = true
	}
}
