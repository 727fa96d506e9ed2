package mcp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// MaxEventBytes bounds one server-sent event, its lines and their
// terminators: a longer one is an error wrapping ErrAnswer (the filter
// must hold a whole event to decide on it).
const MaxEventBytes = 4 << 20

// endpointEvent is the event type of the HTTP+SSE transport's first event,
// whose data is the URL to POST to (not JSON).
const endpointEvent = "endpoint"

// FilterSSE filters a text/event-stream answer of an MCP server: a
// Streamable HTTP POST's answer or GET stream, or the HTTP+SSE transport's
// GET stream. Each event is passed on as soon as its blank line arrives,
// and never more than one event is held.
//
// Events are framed as the HTML specification says (lines end with CR,
// LF or CRLF; data lines are joined with "\n"; a blank line ends an
// event; a leading byte order mark is dropped), and an unterminated event
// at the end of the stream is filtered like any other, since the Go SDK's
// client dispatches it. An event whose data is JSON has its tools/list
// answers filtered as FilterJSON does, whatever its event type; when a
// tool is removed the event is written anew (its other fields in their
// order, the data as "data:" lines, LF endings). Every other event passes
// byte for byte, except that a CR not followed by LF is followed by one:
// that changes nothing for a parser that follows the specification, and a
// client that only splits lines at LF (the Go SDK's) then sees the events
// egressd saw.
//
// Fail closed: an event over MaxEventBytes, an event with non-empty data
// that is not JSON (except the "endpoint" event of the HTTP+SSE
// transport), and a tools answer FilterJSON refuses end the stream with an
// error wrapping ErrAnswer after the events before it.
func FilterSSE(r io.Reader, allow func(tool string) bool) io.Reader {
	return newSSEFilter(r, allow)
}

// sseFilter is FilterSSE's reader.
type sseFilter struct {
	br    *bufio.Reader
	allow func(string) bool
	// onEvent, if set, is called with each event's type and data.
	onEvent func(typ string, data []byte)

	started bool // the byte order mark has been looked for
	// pendingCR is set when the last line ended with a CR whose next byte
	// was not yet read: if that byte is not LF, an LF is written first.
	pendingCR bool
	// dropLF is set with pendingCR when the CR ended an event written
	// anew, which ends with its own LF: an LF after that CR is dropped.
	dropLF bool

	ev  event
	out []byte // what Read hands out next
	err error  // returned once out is drained
}

// event is the event being read.
type event struct {
	raw     []byte // the event's bytes as passed on, lone CRs made CRLF
	lines   []span // each line's content in raw, without its terminator
	data    []byte // the data lines' values joined with "\n"
	hasData bool
	typ     string
}

func newSSEFilter(r io.Reader, allow func(string) bool) *sseFilter {
	return &sseFilter{br: bufio.NewReader(r), allow: allow}
}

func (f *sseFilter) Read(p []byte) (int, error) {
	for len(f.out) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		f.out, f.err = f.next()
	}
	n := copy(p, f.out)
	f.out = f.out[n:]
	return n, nil
}

// next reads one event and returns what to pass on for it.
func (f *sseFilter) next() ([]byte, error) {
	if f.pendingCR { // a CR ended the last event
		lf, err := f.resolveCR()
		if err != nil {
			return nil, err
		}
		if lf {
			return []byte{'\n'}, nil
		}
	}
	ev := &f.ev
	ev.raw, ev.lines, ev.data, ev.hasData, ev.typ = ev.raw[:0], ev.lines[:0], ev.data[:0], false, ""
	if !f.started {
		f.started = true
		// Peek past the first byte only when it can start a mark, so that
		// a short first event is not held waiting for more bytes.
		if b, err := f.br.Peek(1); err == nil && b[0] == 0xef {
			if b, err := f.br.Peek(3); err == nil && string(b) == "\xef\xbb\xbf" {
				_, _ = f.br.Discard(3) // peeked: cannot fail
			}
		}
	}
	for {
		line, ended, err := f.readLine()
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		if ended && line.start == line.end {
			out, ferr := f.dispatch()
			if ferr != nil {
				return nil, ferr
			}
			return out, nil
		}
		if line.start < line.end {
			ev.lines = append(ev.lines, line)
			f.field(ev.raw[line.start:line.end])
		}
		if err != nil { // io.EOF
			if len(ev.raw) == 0 {
				return nil, io.EOF
			}
			out, ferr := f.dispatch()
			if ferr != nil {
				return nil, ferr
			}
			return out, io.EOF
		}
	}
}

// resolveCR reads past the CR that ended the last line, reporting whether
// an LF is to be passed on after it: the LF that followed it, or one
// added after a lone CR so that it ends a line for every parser; none
// after an event written anew, which ends with its own.
func (f *sseFilter) resolveCR() (lf bool, err error) {
	f.pendingCR = false
	drop := f.dropLF
	f.dropLF = false
	b, err := f.br.Peek(1)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("read event stream: %w", err)
	}
	if err == nil && b[0] == '\n' {
		_, _ = f.br.Discard(1) // peeked: cannot fail
	}
	return !drop, nil
}

// readLine appends the next line to ev.raw and returns its content's
// span; ended reports a terminator (else the stream ended first).
func (f *sseFilter) readLine() (line span, ended bool, err error) {
	ev := &f.ev
	if f.pendingCR { // a CR ended the event's last line
		lf, err := f.resolveCR()
		if err != nil {
			return span{}, false, err
		}
		if lf {
			ev.raw = append(ev.raw, '\n')
		}
	}
	line.start = len(ev.raw)
	for {
		if f.br.Buffered() == 0 {
			if _, err := f.br.Peek(1); err != nil {
				line.end = len(ev.raw)
				if errors.Is(err, io.EOF) {
					return line, false, io.EOF
				}
				return line, false, fmt.Errorf("read event stream: %w", err)
			}
		}
		buf, _ := f.br.Peek(f.br.Buffered())
		i := bytes.IndexAny(buf, "\r\n")
		n := len(buf)
		if i >= 0 {
			n = i + 1
		}
		if len(ev.raw)+n+1 > MaxEventBytes {
			return span{}, false, fmt.Errorf("%w: an event over %d bytes", ErrAnswer, MaxEventBytes)
		}
		ev.raw = append(ev.raw, buf[:n]...)
		_, _ = f.br.Discard(n) // peeked: cannot fail
		if i < 0 {
			continue
		}
		line.end = len(ev.raw) - 1
		if buf[i] == '\r' {
			if f.br.Buffered() == 0 {
				// Do not wait for the next byte: it may not come until the
				// server's next event, and this line may end this one.
				f.pendingCR = true
			} else if next, _ := f.br.Peek(1); next[0] == '\n' {
				ev.raw = append(ev.raw, '\n')
				_, _ = f.br.Discard(1) // peeked: cannot fail
			} else {
				ev.raw = append(ev.raw, '\n')
			}
		}
		return line, true, nil
	}
}

// field interprets one non-blank line of the event.
func (f *sseFilter) field(line []byte) {
	if line[0] == ':' {
		return
	}
	name, value, _ := bytes.Cut(line, []byte{':'})
	value = bytes.TrimPrefix(value, []byte{' '})
	switch string(name) {
	case "event":
		f.ev.typ = string(value)
	case "data":
		if f.ev.hasData {
			f.ev.data = append(f.ev.data, '\n')
		}
		f.ev.data = append(f.ev.data, value...)
		f.ev.hasData = true
	}
}

// dispatch decides on the complete event and returns its bytes to pass
// on: its own, or the event written anew with its tools filtered.
func (f *sseFilter) dispatch() ([]byte, error) {
	ev := &f.ev
	if f.onEvent != nil {
		f.onEvent(ev.typ, ev.data)
	}
	if len(ev.data) == 0 {
		return ev.raw, nil
	}
	if !json.Valid(ev.data) {
		if ev.typ == endpointEvent {
			return ev.raw, nil
		}
		return nil, fmt.Errorf("%w: an event's data is not JSON", ErrAnswer)
	}
	data, changed, err := filterMessage(ev.data, f.allow)
	if err != nil {
		return nil, err
	}
	if !changed {
		return ev.raw, nil
	}
	f.dropLF = f.pendingCR
	return ev.rewrite(data), nil
}

// rewrite writes the event anew with data: its lines in their order, the
// data lines replaced by data's lines where the first one stood, comments
// dropped, every line ended by LF.
func (ev *event) rewrite(data []byte) []byte {
	out := make([]byte, 0, len(ev.raw)+len(data))
	wroteData := false
	for _, l := range ev.lines {
		line := ev.raw[l.start:l.end]
		if line[0] == ':' {
			continue
		}
		name, _, _ := bytes.Cut(line, []byte{':'})
		if string(name) != "data" {
			out = append(append(out, line...), '\n')
			continue
		}
		if wroteData {
			continue
		}
		wroteData = true
		for piece := range bytes.SplitSeq(data, []byte{'\n'}) {
			out = append(append(append(out, "data: "...), piece...), '\n')
		}
	}
	return append(out, '\n')
}
