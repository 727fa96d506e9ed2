package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
)

// FuzzParse checks Parse against an independent reading of the same body
// with encoding/json (exact keys, typed values), in both directions: the
// oracle's error is Parse's error, and the calls agree field by field.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ticket.create","arguments":{"capability":"simulate"}}}`,
		`[{"jsonrpc":"2.0","id":"a","method":"ping"},{"jsonrpc":"2.0","method":"notifications/x"},{"jsonrpc":"2.0","id":2,"result":{}}]`,
		`{"jsonrpc":"2.0","id":null,"error":{"code":1}}`,
		`{"jsonrpc":"2.0","id":1e3,"method":"tools/call","params":{"name":"x","arguments":null}}`,
		`{"jsonrpc":"2.0","method":"tools/list","params":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		v, err := decodeValue(body)
		if err != nil {
			return // the lead's parser refuses it before Parse
		}
		r, err := Parse(v)
		want, werr := oracleParse(body)
		if (err != nil) != (werr != nil) {
			t.Fatalf("Parse(%s) error = %v; oracle error = %v", body, err, werr)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Parse(%s) = %v; want ErrMalformed", body, err)
			}
			return
		}
		if r.Batch != want.Batch || len(r.Calls) != len(want.Calls) {
			t.Fatalf("Parse(%s) = batch %v, %d calls; oracle batch %v, %d", body, r.Batch, len(r.Calls), want.Batch, len(want.Calls))
		}
		for i, c := range r.Calls {
			w := want.Calls[i]
			if c.Method != w.Method || c.Tool != w.Tool || c.ID != w.ID || c.Response != w.Response ||
				(c.Arguments == nil) != (w.Arguments == nil) || (c.Arguments != nil && c.Arguments.Compare(w.Arguments) != 0) {
				t.Fatalf("Parse(%s) call %d = %+v; oracle %+v", body, i, c, w)
			}
			term := r.CallTerm(i)
			if c.Method == MethodToolsCall {
				if got := term.Get(ast.InternedTerm("tool")); got == nil || got.Value.Compare(ast.String(c.Tool)) != 0 {
					t.Fatalf("CallTerm(%d) = %v; want tool %q", i, term, c.Tool)
				}
			}
		}
		_ = r.Term()
	})
}

// oracleParse reads body with encoding/json as the specification says a
// request body reads.
func oracleParse(body []byte) (*Request, error) {
	var arr []json.RawMessage
	if err := json.Unmarshal(body, &arr); err == nil {
		if len(arr) == 0 {
			return nil, errors.New("empty batch")
		}
		r := &Request{Batch: true}
		for _, e := range arr {
			c, err := oracleMessage(e)
			if err != nil {
				return nil, err
			}
			r.Calls = append(r.Calls, c)
		}
		return r, nil
	}
	c, err := oracleMessage(body)
	if err != nil {
		return nil, err
	}
	return &Request{Calls: []Call{c}}, nil
}

func oracleMessage(raw []byte) (Call, error) {
	var c Call
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return c, errors.New("not an object")
	}
	var version string
	if json.Unmarshal(m["jsonrpc"], &version) != nil || version != "2.0" || !isString(m["jsonrpc"]) {
		return c, errors.New("jsonrpc")
	}
	if id, ok := m["id"]; ok {
		switch {
		case isString(id):
			var s string
			_ = json.Unmarshal(id, &s) // the oracle reads what decodes; the rest stays zero
			c.ID = jsonString(s)
		case string(id) == "null":
			c.ID = "null"
		case isNumber(id):
			c.ID = string(id)
		default:
			return c, errors.New("id")
		}
	}
	_, hasResult := m["result"]
	_, hasError := m["error"]
	method, hasMethod := m["method"]
	if !hasMethod {
		if !hasResult && !hasError {
			return c, errors.New("neither")
		}
		if _, ok := m["id"]; !ok {
			return c, errors.New("response without id")
		}
		c.Response = true
		return c, nil
	}
	if hasResult || hasError {
		return c, errors.New("both")
	}
	if !isString(method) {
		return c, errors.New("method")
	}
	_ = json.Unmarshal(method, &c.Method)
	params, hasParams := m["params"]
	if hasParams && !bytes.HasPrefix(params, []byte("{")) && !bytes.HasPrefix(params, []byte("[")) {
		return c, errors.New("params")
	}
	if c.Method != "tools/call" {
		return c, nil
	}
	var p map[string]json.RawMessage
	if !hasParams || json.Unmarshal(params, &p) != nil || p == nil {
		return c, errors.New("tools/call params")
	}
	if !isString(p["name"]) {
		return c, errors.New("name")
	}
	_ = json.Unmarshal(p["name"], &c.Tool)
	if len(c.Tool) < 1 || len(c.Tool) > 128 {
		return c, errors.New("name length")
	}
	if args, ok := p["arguments"]; ok && string(args) != "null" {
		if !bytes.HasPrefix(args, []byte("{")) {
			return c, errors.New("arguments")
		}
		v, err := decodeValue(args)
		if err != nil {
			return c, err
		}
		c.Arguments = v
	}
	return c, nil
}

// isString and isNumber look at a raw value's first byte: encoding/json
// hands out values without leading space.
func isString(raw json.RawMessage) bool { return len(raw) > 0 && raw[0] == '"' }
func isNumber(raw json.RawMessage) bool {
	return len(raw) > 0 && (raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9')
}

// FuzzToolMatches checks the linear glob match against a regular
// expression built from the glob (RE2: linear too, and written by others).
func FuzzToolMatches(f *testing.F) {
	for _, s := range [][2]string{{"search_*", "search_docs"}, {"a*b*c", "aXbYc"}, {"*.create", "t.create"}, {"*", ""}, {"a**b", "ab"}, {"x.y", "xzy"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, glob, name string) {
		if !utf8.ValidString(glob) || !utf8.ValidString(name) || len(glob) > 200 || len(name) > 1000 {
			return
		}
		parts := strings.Split(glob, "*")
		for i, p := range parts {
			parts[i] = regexp.QuoteMeta(p)
		}
		re := regexp.MustCompile(`^` + strings.Join(parts, `(?s:.*)`) + `$`)
		if got, want := ToolMatches([]string{glob}, name), re.MatchString(name); got != want {
			t.Fatalf("ToolMatches(%q, %q) = %v; regexp says %v", glob, name, got, want)
		}
	})
}

// FuzzFilterSSE checks the streaming filter, fed and read in random
// chunkings, against a whole-text reference framing of the same stream;
// and checks that no tools answer in the output offers a refused tool,
// read both as the HTML specification frames events and as the Go SDK's
// client (lines split at LF only) does.
func FuzzFilterSSE(f *testing.F) {
	for _, s := range []string{
		"id: 1\ndata: " + toolsAnswer + "\n\ndata: " + otherAnswer + "\n\n",
		"data: " + toolsAnswer + "\r\n\r\n: c\r\ndata: " + otherAnswer + "\r\r",
		"\xef\xbb\xbfevent: endpoint\ndata: /x\n\ndata: [" + toolsAnswer + "]",
		"data: {\"result\":\ndata: {\"tools\":[{\"name\":\"delete_repo\"}]}}\r\n\n",
		"data\ndata:\n\n:\r\n",
	} {
		f.Add([]byte(s), uint64(1))
	}
	allow := func(tool string) bool { return strings.HasPrefix(tool, "search") }
	f.Fuzz(func(t *testing.T, in []byte, seed uint64) {
		want, werr := referenceFilterSSE(in, allow)
		rng := rand.New(rand.NewPCG(seed, seed>>1|1))
		got, gerr := readChunked(FilterSSE(&chunkReader{b: in, rng: rng}, allow), rng)
		if (gerr != nil) != (werr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("FilterSSE(%q) = %q, %v; reference %q, %v", in, got, gerr, want, werr)
		}
		if gerr != nil && !errors.Is(gerr, ErrAnswer) {
			t.Fatalf("FilterSSE(%q) error = %v; want ErrAnswer", in, gerr)
		}
		for _, ev := range append(htmlEvents(got), sdkEvents(got)...) {
			if name, ok := offeredRefused(ev, allow); ok {
				t.Fatalf("FilterSSE(%q) = %q offers refused tool %q", in, got, name)
			}
		}
	})
}

// chunkReader hands out b in random pieces of 1 to 16 bytes.
type chunkReader struct {
	b   []byte
	rng *rand.Rand
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(c.b), 1+c.rng.IntN(16))
	copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}

// readChunked reads r to its end with reads of random sizes.
func readChunked(r io.Reader, rng *rand.Rand) ([]byte, error) {
	var out []byte
	for {
		buf := make([]byte, 1+rng.IntN(32))
		n, err := r.Read(buf)
		out = append(out, buf[:n]...)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

// refLine is one line of a stream as the whole-text reference splits it.
type refLine struct {
	text       string
	terminator string // "\n", "\r\n", "\r", or "" at the end of the stream
}

// referenceFilterSSE frames the whole text at once and applies FilterSSE's
// documented rules: events end at blank lines or the end of the stream;
// JSON data is filtered; non-JSON data outside "endpoint" events stops
// the stream; lone CRs get an LF.
func referenceFilterSSE(in []byte, allow func(string) bool) ([]byte, error) {
	s := strings.TrimPrefix(string(in), "\xef\xbb\xbf")
	var lines []refLine
	for len(s) > 0 {
		i := strings.IndexAny(s, "\r\n")
		if i < 0 {
			lines = append(lines, refLine{text: s})
			break
		}
		term := s[i : i+1]
		if strings.HasPrefix(s[i:], "\r\n") {
			term = "\r\n"
		}
		lines = append(lines, refLine{text: s[:i], terminator: term})
		s = s[i+len(term):]
	}
	var out []byte
	var ev []refLine
	flush := func() error {
		if len(ev) == 0 {
			return nil
		}
		b, err := referenceEvent(ev, allow)
		if err != nil {
			return err
		}
		out = append(out, b...)
		ev = ev[:0]
		return nil
	}
	for _, l := range lines {
		ev = append(ev, l)
		if l.text == "" && l.terminator != "" {
			if err := flush(); err != nil {
				return out, err
			}
		}
	}
	return out, flush()
}

func referenceEvent(ev []refLine, allow func(string) bool) ([]byte, error) {
	var data []string
	typ := ""
	var raw strings.Builder
	for _, l := range ev {
		term := l.terminator
		if term == "\r" {
			term = "\r\n"
		}
		raw.WriteString(l.text + term)
		if l.text == "" || l.text[0] == ':' {
			continue
		}
		name, value, _ := strings.Cut(l.text, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "event":
			typ = value
		case "data":
			data = append(data, value)
		}
	}
	joined := strings.Join(data, "\n")
	if joined == "" {
		return []byte(raw.String()), nil
	}
	if !json.Valid([]byte(joined)) {
		if typ == "endpoint" {
			return []byte(raw.String()), nil
		}
		return nil, ErrAnswer
	}
	filtered, err := FilterJSON([]byte(joined), allow)
	if err != nil {
		return nil, err
	}
	if string(filtered) == joined {
		return []byte(raw.String()), nil
	}
	var b strings.Builder
	wrote := false
	for _, l := range ev {
		if l.text == "" || l.text[0] == ':' {
			continue
		}
		if name, _, _ := strings.Cut(l.text, ":"); name != "data" {
			b.WriteString(l.text + "\n")
		} else if !wrote {
			wrote = true
			for _, piece := range strings.Split(string(filtered), "\n") {
				b.WriteString("data: " + piece + "\n")
			}
		}
	}
	return []byte(b.String() + "\n"), nil
}

// htmlEvents is the data of each event of out as the HTML specification
// frames them (the reference's framing).
func htmlEvents(out []byte) []string {
	var evs []string
	var data []string
	s := string(out)
	for len(s) > 0 {
		i := strings.IndexAny(s, "\r\n")
		line := s
		if i < 0 {
			s = ""
		} else {
			line = s[:i]
			if strings.HasPrefix(s[i:], "\r\n") {
				i++
			}
			s = s[i+1:]
		}
		if line == "" {
			evs = append(evs, strings.Join(data, "\n"))
			data = nil
			continue
		}
		if name, value, _ := strings.Cut(line, ":"); name == "data" {
			data = append(data, strings.TrimPrefix(value, " "))
		}
	}
	return append(evs, strings.Join(data, "\n"))
}

// sdkEvents is the data of each event of out as the Go SDK's client reads
// them (go-sdk v1.8.0 mcp/event.go: lines split at LF, CR and LF trimmed
// from the end, values trimmed of space, every event dispatched, also an
// unterminated last one).
func sdkEvents(out []byte) []string {
	var evs []string
	var data []string
	for line := range strings.SplitSeq(string(out), "\n") {
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			evs = append(evs, strings.Join(data, "\n"))
			data = nil
			continue
		}
		if name, value, _ := strings.Cut(line, ":"); name == "data" {
			data = append(data, strings.TrimSpace(value))
		}
	}
	return append(evs, strings.Join(data, "\n"))
}

// offeredRefused finds a refused tool name offered by a tools answer in
// data, read with encoding/json (the last of duplicate keys wins, as in
// the SDK's decoder).
func offeredRefused(data string, allow func(string) bool) (string, bool) {
	var msg any
	if json.Unmarshal([]byte(data), &msg) != nil {
		return "", false
	}
	msgs, ok := msg.([]any)
	if !ok {
		msgs = []any{msg}
	}
	for _, m := range msgs {
		obj, _ := m.(map[string]any)
		result, _ := obj["result"].(map[string]any)
		tools, _ := result["tools"].([]any)
		for _, tool := range tools {
			to, _ := tool.(map[string]any)
			if name, ok := to["name"].(string); ok && !allow(name) {
				return name, true
			}
		}
	}
	return "", false
}
