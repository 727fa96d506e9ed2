package mcp

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
)

// toolsList is a tools/list answer with n tools, every third refused.
func toolsList(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"jsonrpc":"2.0","id":1,"result":{"tools":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		name := fmt.Sprintf("search_%d", i)
		if i%3 == 0 {
			name = fmt.Sprintf("delete_%d", i)
		}
		fmt.Fprintf(&b, `{"name":%q,"description":"a tool","inputSchema":{"type":"object","properties":{"q":{"type":"string"}}}}`, name)
	}
	b.WriteString(`]}}`)
	return []byte(b.String())
}

func BenchmarkParse(b *testing.B) {
	v := value(b, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"ticket.create","arguments":{"capability":"simulate","title":"t"}}}`)
	b.ReportAllocs()
	for b.Loop() {
		r, err := Parse(v)
		if err != nil {
			b.Fatal(err)
		}
		_ = r.Term()
	}
}

func BenchmarkFilterJSON(b *testing.B) {
	for _, n := range []int{10, 40000} {
		body := toolsList(n)
		b.Run(fmt.Sprintf("%dtools-%dKiB", n, len(body)>>10), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := FilterJSON(body, allowSearch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkFilterSSE(b *testing.B) {
	stream := []byte("event: message\ndata: " + string(toolsList(10)) + "\n\n" + strings.Repeat("data: "+otherAnswer+"\n\n", 100))
	b.ReportAllocs()
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		if _, err := io.Copy(io.Discard, FilterSSE(bytes.NewReader(stream), allowSearch)); err != nil {
			b.Fatal(err)
		}
	}
}
