package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// ErrAnswer is wrapped by the errors of FilterJSON and FilterSSE: an
// answer of the server whose tools cannot be told for sure (not JSON, a
// duplicate "result" or "tools" key, an event over MaxEventBytes). The
// proxy must not pass such an answer on: it cuts it off (the client sees
// a 502 or a broken stream), since passing it could offer a refused tool.
var ErrAnswer = errors.New("unfilterable MCP answer")

// FilterJSON removes the tools allow refuses from every tools/list answer
// in body, an application/json answer of an MCP server (one JSON-RPC
// message or a batch of them), and returns body itself when nothing was
// removed.
//
// A tools/list answer is any JSON-RPC response whose result is an object
// with a "tools" array; the request's id is not tracked. That is safe
// because the filter only ever removes array elements: if some other
// result had a "tools" array, the worst is that its refused names are
// withheld, and no answer can offer a tool without passing here. A tool is
// kept only if it is an object with exactly one "name" member, a string of
// 1 to MaxToolName bytes that allow accepts; anything else is dropped
// (fail closed: a client might read a name egressd cannot). Kept tools
// keep their bytes; the array is rejoined with "," between them.
//
// A body that is not JSON, or a response with two "result" members or a
// result with two "tools" members (a parser differential: which one would
// the client read?), is an error wrapping ErrAnswer. A body of only
// whitespace (an acknowledgement) is returned as it is.
func FilterJSON(body []byte, allow func(tool string) bool) ([]byte, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return body, nil
	}
	out, _, err := filterMessage(body, allow)
	return out, err
}

// toolsKey is the member name tools/list answers carry.
var toolsKey = []byte(`"tools"`)

// filterMessage is FilterJSON on one JSON text, reporting whether it
// removed a tool.
func filterMessage(msg []byte, allow func(string) bool) ([]byte, bool, error) {
	if !json.Valid(msg) {
		return nil, false, fmt.Errorf("%w: not JSON", ErrAnswer)
	}
	if !bytes.Contains(msg, toolsKey) && bytes.IndexByte(msg, '\\') < 0 {
		// No member is named "tools", neither as written nor escaped (an
		// escape needs a backslash): nothing can be offered, and which of
		// two "result" members a client reads offers nothing either. Most
		// answers (tool results) end here, unparsed.
		return msg, false, nil
	}
	body := bytes.TrimSpace(msg)
	switch body[0] {
	case '{':
		out, changed, err := filterResponse(body, allow)
		if err != nil || !changed {
			return msg, false, err
		}
		return out, true, nil
	case '[':
		elems, err := arrayElements(body)
		if err != nil {
			return nil, false, err
		}
		var out []byte
		last, changed := 0, false
		for _, e := range elems {
			if body[e.start] != '{' {
				continue
			}
			fe, ch, err := filterResponse(body[e.start:e.end], allow)
			if err != nil {
				return nil, false, err
			}
			if ch {
				out = append(append(out, body[last:e.start]...), fe...)
				last, changed = e.end, true
			}
		}
		if !changed {
			return msg, false, nil
		}
		return append(out, body[last:]...), true, nil
	default:
		return msg, false, nil
	}
}

// filterResponse filters result.tools of one JSON object.
func filterResponse(obj []byte, allow func(string) bool) ([]byte, bool, error) {
	result, ok, err := uniqueMember(obj, "result")
	if err != nil || !ok || obj[result.start] != '{' {
		return obj, false, err
	}
	res := obj[result.start:result.end]
	tools, ok, err := uniqueMember(res, "tools")
	if err != nil || !ok || res[tools.start] != '[' {
		return obj, false, err
	}
	arr := res[tools.start:tools.end]
	elems, err := arrayElements(arr)
	if err != nil {
		return nil, false, err
	}
	kept := make([]byte, 0, len(arr))
	kept = append(kept, '[')
	dropped := false
	for _, e := range elems {
		if !toolAllowed(arr[e.start:e.end], allow) {
			dropped = true
			continue
		}
		if len(kept) > 1 {
			kept = append(kept, ',')
		}
		kept = append(kept, arr[e.start:e.end]...)
	}
	if !dropped {
		return obj, false, nil
	}
	kept = append(kept, ']')
	at := result.start + tools.start
	out := make([]byte, 0, len(obj)-len(arr)+len(kept))
	out = append(out, obj[:at]...)
	out = append(out, kept...)
	out = append(out, obj[at+len(arr):]...)
	return out, true, nil
}

// toolAllowed reports whether one element of a tools array is kept.
func toolAllowed(tool []byte, allow func(string) bool) bool {
	if tool[0] != '{' {
		return false
	}
	ms, err := objectMembers(tool)
	if err != nil {
		return false
	}
	var name string
	names := 0
	for _, m := range ms {
		if m.key != "name" {
			continue
		}
		names++
		if tool[m.start] != '"' || json.Unmarshal(tool[m.start:m.end], &name) != nil {
			return false
		}
	}
	return names == 1 && len(name) > 0 && len(name) <= MaxToolName && allow(name)
}

// span is a JSON value's place in the text it was read from: [start, end).
type span struct{ start, end int }

// objMember is one member of a JSON object: its key, unescaped, and its
// value's span.
type objMember struct {
	key string
	span
}

// uniqueMember finds key's value in a JSON object; a second member of the
// same key is an error.
func uniqueMember(obj []byte, key string) (span, bool, error) {
	ms, err := objectMembers(obj)
	if err != nil {
		return span{}, false, err
	}
	var found span
	n := 0
	for _, m := range ms {
		if m.key == key {
			found = m.span
			n++
		}
	}
	if n > 1 {
		return span{}, false, fmt.Errorf("%w: %d %q members", ErrAnswer, n, key)
	}
	return found, n == 1, nil
}

// objectMembers lists the members of obj, a valid JSON object.
func objectMembers(obj []byte) ([]objMember, error) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAnswer, err)
	}
	var ms []objMember
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrAnswer, err)
		}
		key, _ := t.(string)
		s, err := nextValue(dec, obj)
		if err != nil {
			return nil, err
		}
		ms = append(ms, objMember{key: key, span: s})
	}
	return ms, nil
}

// arrayElements lists the spans of the elements of arr, a valid JSON
// array.
func arrayElements(arr []byte) ([]span, error) {
	dec := json.NewDecoder(bytes.NewReader(arr))
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAnswer, err)
	}
	var es []span
	for dec.More() {
		s, err := nextValue(dec, arr)
		if err != nil {
			return nil, err
		}
		es = append(es, s)
	}
	return es, nil
}

// nextValue reads the decoder's next value and finds its span in text.
func nextValue(dec *json.Decoder, text []byte) (span, error) {
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return span{}, fmt.Errorf("%w: %w", ErrAnswer, err)
	}
	end := int(dec.InputOffset())
	s := span{start: end - len(raw), end: end}
	// The decoder hands out the value's own bytes; check rather than trust
	// that offsets and bytes agree, since a splice at a wrong offset would
	// corrupt the answer.
	if s.start < 0 || end > len(text) || !bytes.Equal(text[s.start:end], raw) {
		return span{}, fmt.Errorf("%w: value offsets disagree", ErrAnswer)
	}
	return s, nil
}
