package llm

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestUsageJSON(t *testing.T) {
	tests := []struct {
		name, api, endpoint, body string
		want                      Usage
	}{
		{"chat", "openai", "chat/completions", `{"id":"x","usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}`, Usage{12, 5, true}},
		{"completions", "openai", "completions", `{"usage":{"prompt_tokens":1,"completion_tokens":0}}`, Usage{1, 0, true}},
		{"embeddings", "openai", "embeddings", `{"usage":{"prompt_tokens":8,"total_tokens":8}}`, Usage{8, 0, true}},
		{"responses", "openai", "responses", `{"usage":{"input_tokens":30,"output_tokens":9,"output_tokens_details":{"reasoning_tokens":4}}}`, Usage{30, 9, true}},
		{"messages", "anthropic", "messages", `{"usage":{"input_tokens":10,"output_tokens":3}}`, Usage{10, 3, true}},
		{"messages cached", "anthropic", "messages", `{"usage":{"input_tokens":10,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":3}}`, Usage{1110, 3, true}},
		{"messages null cache", "anthropic", "messages", `{"usage":{"input_tokens":10,"cache_read_input_tokens":null,"output_tokens":3}}`, Usage{10, 3, true}},
		{"count_tokens costs nothing", "anthropic", "messages/count_tokens", `{"input_tokens":10}`, Usage{Found: true}},

		{"chat keys of responses", "openai", "chat/completions", `{"usage":{"input_tokens":30,"output_tokens":9}}`, Usage{}},
		{"null usage", "openai", "chat/completions", `{"usage":null}`, Usage{}},
		{"no usage", "openai", "responses", `{"status":"queued"}`, Usage{}},
		{"usage in another case", "openai", "chat/completions", `{"Usage":{"prompt_tokens":1,"completion_tokens":1}}`, Usage{}},
		{"negative", "openai", "chat/completions", `{"usage":{"prompt_tokens":-1,"completion_tokens":5}}`, Usage{}},
		{"fraction", "openai", "chat/completions", `{"usage":{"prompt_tokens":1.5,"completion_tokens":5}}`, Usage{}},
		{"string", "anthropic", "messages", `{"usage":{"input_tokens":"1","output_tokens":5}}`, Usage{}},
		{"missing output", "anthropic", "messages", `{"usage":{"input_tokens":1}}`, Usage{}},
		{"too large a count", "openai", "chat/completions", `{"usage":{"prompt_tokens":1,"completion_tokens":99999999999999}}`, Usage{}},
		{"not JSON", "openai", "chat/completions", `<html>`, Usage{}},
		{"an error", "anthropic", "messages", `{"type":"error","error":{"type":"overloaded_error"}}`, Usage{}},
		{"unknown endpoint", "openai", "images", `{"usage":{"prompt_tokens":1,"completion_tokens":1}}`, Usage{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := UsageJSON(tt.api, tt.endpoint, []byte(tt.body)); got != tt.want {
				t.Errorf("UsageJSON(%s, %s, %s) = %+v; want %+v", tt.api, tt.endpoint, tt.body, got, tt.want)
			}
		})
	}
	big := `{"usage":{"prompt_tokens":1,"completion_tokens":1},"pad":"` + strings.Repeat("x", MaxUsageBody) + `"}`
	if got := UsageJSON("openai", "chat/completions", []byte(big)); got.Found {
		t.Errorf("UsageJSON of %d bytes = %+v; want not read", len(big), got)
	}
}

// sseCases are streams and the usage read from them.
var sseCases = []struct {
	name, api, endpoint, stream string
	want                        Usage
}{
	{"chat with usage", "openai", "chat/completions",
		"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n" +
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n", Usage{9, 2, true}},
	{"chat without usage", "openai", "chat/completions",
		"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n", Usage{}},
	{"CRLF", "openai", "completions",
		"data: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\r\n\r\ndata: [DONE]\r\n\r\n", Usage{3, 4, true}},
	{"CR", "openai", "completions",
		"data: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\r\rdata: [DONE]\r\r", Usage{3, 4, true}},
	{"BOM, comments, ids, data in lines", "openai", "chat/completions",
		"\ufeff: keep-alive\nid: 1\ndata: {\"usage\":\ndata:{\"prompt_tokens\":3,\ndata:  \"completion_tokens\":4}}\nretry: 10\n\n", Usage{3, 4, true}},
	{"the last usage wins", "openai", "chat/completions",
		"data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\ndata: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n", Usage{3, 4, true}},
	{"nothing after DONE", "openai", "chat/completions",
		"data: [DONE]\n\ndata: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n", Usage{}},
	{"nothing after an error", "openai", "chat/completions",
		"data: {\"error\":{\"message\":\"overloaded\"}}\n\ndata: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n", Usage{}},
	{"nothing after an event not JSON", "openai", "chat/completions",
		"data: {oops\n\ndata: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n", Usage{}},
	{"a null event is read as nothing", "openai", "chat/completions",
		"data: null\n\ndata: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n", Usage{3, 4, true}},
	{"an unfinished event is not read", "openai", "chat/completions",
		"data: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n", Usage{}},
	{"responses completed", "openai", "responses",
		"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\n" +
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":20,\"output_tokens\":6}}}\n\n", Usage{20, 6, true}},
	{"responses incomplete", "openai", "responses",
		"event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"response\":{\"usage\":{\"input_tokens\":20,\"output_tokens\":4}}}\n\n", Usage{20, 4, true}},
	{"responses cut short", "openai", "responses",
		"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\n", Usage{}},
	{"anthropic", "anthropic", "messages",
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n" +
			"event: ping\ndata: {\"type\":\"ping\"}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", Usage{25, 15, true}},
	{"anthropic delta updates input", "anthropic", "messages",
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"cache_read_input_tokens\":5,\"output_tokens\":1}}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"input_tokens\":30,\"cache_creation_input_tokens\":7,\"output_tokens\":15}}\n\n", Usage{42, 15, true}},
	{"anthropic cut before message_delta", "anthropic", "messages",
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n", Usage{25, 1, false}},
	{"anthropic events without a type are skipped", "anthropic", "messages",
		"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n", Usage{}},
	{"anthropic error", "anthropic", "messages",
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n" +
			"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n", Usage{25, 1, false}},
	{"anthropic malformed delta", "anthropic", "messages",
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":-15}}\n\n", Usage{}},
}

// read passes stream through UsageSSE, reading with wrap, and returns the
// bytes read and the usage done was called with, once.
func read(t *testing.T, api, endpoint, stream string, wrap func(io.Reader) io.Reader) ([]byte, Usage) {
	t.Helper()
	calls := 0
	var got Usage
	out, err := io.ReadAll(wrap(UsageSSE(api, endpoint, strings.NewReader(stream), func(u Usage) { calls++; got = u })))
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatalf("done called %d times; want once", calls)
	}
	return out, got
}

func TestUsageSSE(t *testing.T) {
	for _, tt := range sseCases {
		t.Run(tt.name, func(t *testing.T) {
			for _, r := range []struct {
				name string
				wrap func(io.Reader) io.Reader
			}{
				{"whole", func(r io.Reader) io.Reader { return r }},
				{"byte by byte", iotest.OneByteReader},
				{"halves", iotest.HalfReader},
			} {
				out, got := read(t, tt.api, tt.endpoint, tt.stream, r.wrap)
				if string(out) != tt.stream {
					t.Errorf("%s: passed %q; want %q", r.name, out, tt.stream)
				}
				if got != tt.want {
					t.Errorf("%s: usage %+v; want %+v", r.name, got, tt.want)
				}
			}
		})
	}
}

// TestUsageSSEBound: an event over MaxEventBytes, a long line or long
// data, is passed on whole and not read; the next one is.
func TestUsageSSEBound(t *testing.T) {
	usage := "data: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n"
	for _, big := range []string{
		"data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1},\"pad\":\"" + strings.Repeat("x", MaxEventBytes) + "\"}\n\n",
		strings.Repeat("data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n", MaxEventBytes/50) + "\n",
	} {
		for _, tt := range []struct {
			stream string
			want   Usage
		}{
			{usage + big, Usage{3, 4, true}},
			{big + usage, Usage{3, 4, true}},
			{big, Usage{}},
		} {
			out, got := read(t, "openai", "chat/completions", tt.stream, func(r io.Reader) io.Reader { return r })
			if !bytes.Equal(out, []byte(tt.stream)) || got != tt.want {
				t.Errorf("stream of %d bytes: passed %d bytes, usage %+v; want all, %+v", len(tt.stream), len(out), got, tt.want)
			}
		}
	}
}

type closer struct {
	io.Reader
	closed int
}

func (c *closer) Close() error { c.closed++; return nil }

// TestUsageSSEClose: a stream closed before its end still calls done,
// once.
func TestUsageSSEClose(t *testing.T) {
	src := &closer{Reader: strings.NewReader(sseCases[0].stream)}
	calls := 0
	var got Usage
	r := UsageSSE("openai", "chat/completions", src, func(u Usage) { calls++; got = u })
	rc, ok := r.(io.ReadCloser)
	if !ok {
		t.Fatal("UsageSSE of a ReadCloser is no ReadCloser")
	}
	buf := make([]byte, 20)
	if _, err := io.ReadFull(rc, buf); err != nil {
		t.Fatal(err)
	}
	if err := rc.Close(); err != nil || src.closed != 1 || calls != 1 || got.Found {
		t.Fatalf("Close() = %v: source closed %d times, done called %d times with %+v; want 1, 1, not found", err, src.closed, calls, got)
	}
	_, _ = io.ReadAll(rc)
	_ = rc.Close()
	if calls != 1 {
		t.Errorf("done called %d times; want once", calls)
	}
	if _, ok := UsageSSE("openai", "chat/completions", strings.NewReader(""), func(Usage) {}).(io.Closer); ok {
		t.Error("UsageSSE of a plain Reader is a Closer")
	}
}

// TestUsageSSEError: a read error ends the stream; done is called with
// what was read before it.
func TestUsageSSEError(t *testing.T) {
	boom := errors.New("boom")
	src := io.MultiReader(strings.NewReader(sseCases[0].stream), iotest.ErrReader(boom))
	calls := 0
	var got Usage
	_, err := io.ReadAll(UsageSSE("openai", "chat/completions", src, func(u Usage) { calls++; got = u }))
	if !errors.Is(err, boom) || calls != 1 || got != sseCases[0].want {
		t.Errorf("read error %v: done called %d times with %+v; want boom, once, %+v", err, calls, got, sseCases[0].want)
	}
}
