package llm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// BenchmarkParse: a chat request as the SDK sends it, already parsed.
func BenchmarkParse(b *testing.B) {
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat("x", 1024) +
		`"}],"max_completion_tokens":256,"stream":true,"stream_options":{"include_usage":true},"temperature":0.2}`
	d := json.NewDecoder(strings.NewReader(body))
	d.UseNumber()
	var x any
	if err := d.Decode(&x); err != nil {
		b.Fatal(err)
	}
	v, err := ast.InterfaceToValue(x)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(APIOpenAI, "/v1/chat/completions", v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUsageSSE: a chat stream of 200 chunks and its usage, read in
// 4 KiB reads as a proxy copies it.
func BenchmarkUsageSSE(b *testing.B) {
	var s bytes.Buffer
	for i := range 200 {
		fmt.Fprintf(&s, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"},\"finish_reason\":null}],\"usage\":null}\n\n", i)
	}
	s.WriteString("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":200}}\n\ndata: [DONE]\n\n")
	stream := s.Bytes()
	buf := make([]byte, 4096)
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		var got Usage
		r := UsageSSE(APIOpenAI, EndpointChat, bytes.NewReader(stream), func(u Usage) { got = u })
		if _, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{r}, buf); err != nil {
			b.Fatal(err)
		}
		if !got.Found {
			b.Fatal("no usage")
		}
	}
}
