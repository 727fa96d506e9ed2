package mcp

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// allowSearch allows search_docs and ticket.create, as the witness rule
// "search_*", "ticket.create" does.
func allowSearch(tool string) bool {
	return ToolMatches([]string{"search_*", "ticket.create"}, tool)
}

func TestFilterJSON(t *testing.T) {
	long := strings.Repeat("s", MaxToolName+1)
	tests := []struct {
		name, body, want string
	}{
		{"tools answer",
			`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"search_docs","inputSchema":{"type":"object"}}, {"name":"delete_repo"},{"name":"ticket.create"}],"nextCursor":"c"}}`,
			`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"search_docs","inputSchema":{"type":"object"}},{"name":"ticket.create"}],"nextCursor":"c"}}`},
		{"all refused",
			`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"delete_repo"}]}}`,
			`{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}`},
		{"nothing refused is byte-identical",
			"{\"jsonrpc\":\"2.0\",\n \"id\":1,\"result\":{\"tools\":[ {\"name\":\"search_docs\"} ]}}\n",
			"{\"jsonrpc\":\"2.0\",\n \"id\":1,\"result\":{\"tools\":[ {\"name\":\"search_docs\"} ]}}\n"},
		{"escaped key and name",
			`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"n\u0061me":"delete\u005frepo"},{"name":"search\u005fdocs"}]}}`,
			`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"search\u005fdocs"}]}}`},
		{"malformed tools dropped",
			`{"jsonrpc":"2.0","id":1,"result":{"tools":[1,"search_docs",{"name":7},{"name":"search_docs","name":"search_x"},{"Name":"search_docs"},{"name":""},{"name":"` + long + `"},{"name":"search_ok"}]}}`,
			`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"search_ok"}]}}`},
		{"batch",
			`[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"delete_repo"},{"name":"search_a"}]}}]`,
			`[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"search_a"}]}}]`},
		{"tools not an array", `{"jsonrpc":"2.0","id":1,"result":{"tools":{"name":"delete_repo"}}}`,
			`{"jsonrpc":"2.0","id":1,"result":{"tools":{"name":"delete_repo"}}}`},
		{"a request is not an answer", `{"jsonrpc":"2.0","id":1,"method":"x","params":{"tools":[{"name":"delete_repo"}]}}`,
			`{"jsonrpc":"2.0","id":1,"method":"x","params":{"tools":[{"name":"delete_repo"}]}}`},
		{"acknowledgement", "  \n", "  \n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FilterJSON([]byte(tt.body), allowSearch)
			if err != nil {
				t.Fatalf("FilterJSON(%s) = %v", tt.body, err)
			}
			if string(got) != tt.want {
				t.Errorf("FilterJSON(%s) = %s; want %s", tt.body, got, tt.want)
			}
		})
	}
}

func TestFilterJSONRefuses(t *testing.T) {
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[]},"result":{"tools":[{"name":"delete_repo"}]}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[],"tools":[{"name":"delete_repo"}]}}`,
		`[{"jsonrpc":"2.0","id":1,"result":{"tools":[],"tools":[]}}]`,
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[]}`,
		`{"jsonrpc":"2.0"} {"jsonrpc":"2.0"}`,
		`data: {}`,
	} {
		if got, err := FilterJSON([]byte(body), allowSearch); !errors.Is(err, ErrAnswer) {
			t.Errorf("FilterJSON(%s) = %s, %v; want ErrAnswer", body, got, err)
		}
	}
}

const (
	toolsAnswer   = `{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"search_docs"},{"name":"delete_repo"}]}}`
	toolsFiltered = `{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"search_docs"}]}}`
	otherAnswer   = `{"jsonrpc":"2.0","id":3,"result":{"content":[]}}`
)

func TestFilterSSE(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"untouched events byte for byte",
			": hi\nid: 1\nevent: message\ndata: " + otherAnswer + "\n\nretry: 10\n\n",
			": hi\nid: 1\nevent: message\ndata: " + otherAnswer + "\n\nretry: 10\n\n"},
		{"tools answer rewritten",
			": c\nid: 5\nevent: message\ndata:" + toolsAnswer + "\n\ndata: " + otherAnswer + "\n\n",
			"id: 5\nevent: message\ndata: " + toolsFiltered + "\n\ndata: " + otherAnswer + "\n\n"},
		{"data split over lines",
			"data: {\"jsonrpc\":\"2.0\",\"id\":2,\ndata: \"result\":{\"tools\":[{\"name\":\"delete_repo\"}]}}\n\n",
			"data: {\"jsonrpc\":\"2.0\",\"id\":2,\ndata: \"result\":{\"tools\":[]}}\n\n"},
		{"CRLF", "id: 1\r\ndata: " + toolsAnswer + "\r\n\r\ndata: " + otherAnswer + "\r\n\r\n",
			"id: 1\ndata: " + toolsFiltered + "\n\ndata: " + otherAnswer + "\r\n\r\n"},
		{"lone CR gets an LF", "data: " + otherAnswer + "\r\rdata: " + toolsAnswer + "\r\r",
			"data: " + otherAnswer + "\r\n\r\ndata: " + toolsFiltered + "\n\n"},
		{"byte order mark dropped", "\xef\xbb\xbfdata: " + toolsAnswer + "\n\n",
			"data: " + toolsFiltered + "\n\n"},
		{"unterminated last event filtered", "data: " + toolsAnswer,
			"data: " + toolsFiltered + "\n\n"},
		{"endpoint event", "event: endpoint\ndata: /sse?sessionid=X\n\n",
			"event: endpoint\ndata: /sse?sessionid=X\n\n"},
		{"batch in an event", "data: [" + otherAnswer + "," + toolsAnswer + "]\n\n",
			"data: [" + otherAnswer + "," + toolsFiltered + "]\n\n"},
		{"empty stream", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := io.ReadAll(FilterSSE(strings.NewReader(tt.in), allowSearch))
			if err != nil {
				t.Fatalf("FilterSSE(%q) = %v", tt.in, err)
			}
			if string(got) != tt.want {
				t.Errorf("FilterSSE(%q) = %q; want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestFilterSSERefuses(t *testing.T) {
	big := "data: \"" + strings.Repeat("x", MaxEventBytes) + "\"\n\n"
	for _, tt := range []struct{ name, in, before string }{
		{"not JSON", "data: " + otherAnswer + "\n\ndata: {\"tools\n\n", "data: " + otherAnswer + "\n\n"},
		{"not JSON in a named event", "event: other\ndata: x\n\n", ""},
		{"over the bound", big, ""},
		{"duplicate tools", `data: {"result":{"tools":[],"tools":[]}}` + "\n\n", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := io.ReadAll(FilterSSE(strings.NewReader(tt.in), allowSearch))
			if !errors.Is(err, ErrAnswer) {
				t.Errorf("FilterSSE error = %v; want ErrAnswer", err)
			}
			if string(got) != tt.before {
				t.Errorf("FilterSSE passed %q; want %q", got, tt.before)
			}
		})
	}
}

// TestFilterSSEStreams: each event is passed on as soon as its blank line
// arrives, with the rest of the stream not yet written (even when the
// blank line ends with a CR whose next byte has not come).
func TestFilterSSEStreams(t *testing.T) {
	for _, eol := range []string{"\n", "\r\n", "\r"} {
		pr, pw := io.Pipe()
		f := FilterSSE(pr, allowSearch)
		events := []string{"data: " + otherAnswer + eol + eol, "data: " + toolsAnswer + eol + eol}
		for _, ev := range events {
			go pw.Write([]byte(ev))
			buf := make([]byte, 4096)
			got := readWithin(t, f, buf, time.Second)
			if got == "\n" { // the LF after the last event's CR
				got = readWithin(t, f, buf, time.Second)
			}
			if !strings.Contains(got, `"id"`) {
				t.Fatalf("eol %q: read %q; want the event", eol, got)
			}
		}
		pw.Close()
	}
}

func readWithin(t *testing.T, r io.Reader, buf []byte, d time.Duration) string {
	t.Helper()
	type result struct {
		n   int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		n, err := r.Read(buf)
		ch <- result{n, err}
	}()
	select {
	case res := <-ch:
		if res.err != nil {
			t.Fatalf("Read = %v", res.err)
		}
		return string(buf[:res.n])
	case <-time.After(d):
		t.Fatalf("Read did not return within %v: the filter holds a complete event", d)
		return ""
	}
}

func TestStreamInject(t *testing.T) {
	pr, pw := io.Pipe()
	s := NewStream(pr, allowSearch)
	defer s.Close()
	go pw.Write([]byte("event: endpoint\ndata: /m?sessionid=1\n\n"))
	buf := make([]byte, 4096)
	if got := readWithin(t, s, buf, time.Second); got != "event: endpoint\ndata: /m?sessionid=1\n\n" {
		t.Fatalf("Read = %q", got)
	}
	if got := s.Endpoint(); got != "/m?sessionid=1" {
		t.Errorf("Endpoint() = %q; want /m?sessionid=1", got)
	}
	// The server sends nothing more; the injected event still goes out.
	if err := s.Inject([]byte(`{"jsonrpc":"2.0","id":4,"error":{}}`)); err != nil {
		t.Fatal(err)
	}
	if got, want := readWithin(t, s, buf, time.Second), "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":4,\"error\":{}}\n\n"; got != want {
		t.Fatalf("Read = %q; want %q", got, want)
	}
	go pw.Write([]byte("data: " + toolsAnswer + "\n\n"))
	if got, want := readWithin(t, s, buf, time.Second), "data: "+toolsFiltered+"\n\n"; got != want {
		t.Fatalf("Read = %q; want %q", got, want)
	}
	pw.Close()
	if n, err := s.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("Read at the end = %d, %v; want io.EOF", n, err)
	}
	s.Close()
	if err := s.Inject([]byte(`{}`)); !errors.Is(err, ErrStreamClosed) {
		t.Errorf("Inject after Close = %v; want ErrStreamClosed", err)
	}
}

// TestFilterSSEChunkings pins a few streams against readers that hand out
// one byte at a time.
func TestFilterSSEChunkings(t *testing.T) {
	in := "id: 1\r\ndata: " + toolsAnswer + "\r\n\r\n: x\rdata: " + otherAnswer + "\r\r"
	whole, err := io.ReadAll(FilterSSE(strings.NewReader(in), allowSearch))
	if err != nil {
		t.Fatal(err)
	}
	bytewise, err := io.ReadAll(FilterSSE(&oneByteReader{r: strings.NewReader(in)}, allowSearch))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(whole, bytewise) {
		t.Errorf("one byte at a time = %q; whole = %q", bytewise, whole)
	}
}

type oneByteReader struct{ r io.Reader }

func (o *oneByteReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return o.r.Read(p[:1])
}

// TestFilterJSONEscapedTools: a "tools" member spelt with escapes is
// filtered like the plain one: the unparsed fast path for answers without
// "tools" must not let it through.
func TestFilterJSONEscapedTools(t *testing.T) {
	body := []byte(`{"jsonrpc":"2.0","id":1,"result":{"\u0074ools":[{"name":"ok"},{"name":"secret_tool"}]}}`)
	out, err := FilterJSON(body, func(tool string) bool { return tool == "ok" })
	if err != nil || bytes.Contains(out, []byte("secret_tool")) || !bytes.Contains(out, []byte(`"ok"`)) {
		t.Errorf("FilterJSON(escaped tools) = %s, %v; want secret_tool removed", out, err)
	}
	plain := []byte(`{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"x"}]}}`)
	if out, err := FilterJSON(plain, func(string) bool { return false }); err != nil || !bytes.Equal(out, plain) {
		t.Errorf("FilterJSON(tool result) = %s, %v; want it unchanged", out, err)
	}
	if _, err := FilterJSON([]byte(`{"result":`), func(string) bool { return true }); err == nil {
		t.Error("FilterJSON(not JSON) passed; want ErrAnswer")
	}
}
