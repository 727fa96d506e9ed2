package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// value parses body as the lead's strict parser hands it over: numbers as
// written (UseNumber), as an OPA value.
func value(tb testing.TB, body string) ast.Value {
	tb.Helper()
	v, err := decodeValue([]byte(body))
	if err != nil {
		tb.Fatalf("decode %q: %v", body, err)
	}
	return v
}

func decodeValue(body []byte) (ast.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return nil, err
	}
	// The lead's parser takes one JSON text and nothing after it.
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the JSON text: %v", err)
	}
	return ast.InterfaceToValue(x)
}

func TestParse(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		want  []Call // Arguments compared by their JSON text in args
		args  []string
		batch bool
	}{
		{name: "initialize", body: `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}`,
			want: []Call{{Method: "initialize", ID: "1"}}},
		{name: "string id", body: `{"jsonrpc":"2.0","id":"a\u003cb","method":"ping"}`,
			want: []Call{{Method: "ping", ID: `"a<b"`}}},
		{name: "null id", body: `{"jsonrpc":"2.0","id":null,"method":"ping"}`,
			want: []Call{{Method: "ping", ID: "null"}}},
		{name: "number id as written", body: `{"jsonrpc":"2.0","id":1.50,"method":"ping"}`,
			want: []Call{{Method: "ping", ID: "1.50"}}},
		{name: "notification", body: `{"jsonrpc":"2.0","method":"notifications/initialized"}`,
			want: []Call{{Method: "notifications/initialized"}}},
		{name: "tools/call", body: `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"ticket.create","arguments":{"capability":"simulate","title":"t"}}}`,
			want: []Call{{Method: "tools/call", Tool: "ticket.create", ID: "7"}}, args: []string{`{"capability": "simulate", "title": "t"}`}},
		{name: "tools/call null arguments", body: `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":null}}`,
			want: []Call{{Method: "tools/call", Tool: "x", ID: "7"}}},
		{name: "response", body: `{"jsonrpc":"2.0","id":3,"result":{"content":[]}}`,
			want: []Call{{ID: "3", Response: true}}},
		{name: "error response", body: `{"jsonrpc":"2.0","id":"s","error":{"code":1,"message":"no"}}`,
			want: []Call{{ID: `"s"`, Response: true}}},
		{name: "batch", batch: true,
			body: `[{"jsonrpc":"2.0","id":1,"method":"tools/list"},{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delete_repo"}}]`,
			want: []Call{{Method: "tools/list", ID: "1"}, {Method: "notifications/cancelled"}, {Method: "tools/call", Tool: "delete_repo", ID: "2"}}},
		{name: "batch of one", batch: true, body: `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`,
			want: []Call{{Method: "ping", ID: "1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse(value(t, tt.body))
			if err != nil {
				t.Fatalf("Parse(%s) = %v; want no error", tt.body, err)
			}
			if r.Batch != tt.batch || len(r.Calls) != len(tt.want) {
				t.Fatalf("Parse(%s) = batch %v, %d calls; want batch %v, %d", tt.body, r.Batch, len(r.Calls), tt.batch, len(tt.want))
			}
			for i, c := range r.Calls {
				w := tt.want[i]
				if c.Method != w.Method || c.Tool != w.Tool || c.ID != w.ID || c.Response != w.Response {
					t.Errorf("call %d = %+v; want %+v", i, c, w)
				}
				wantArgs := ""
				if i < len(tt.args) {
					wantArgs = tt.args[i]
				}
				if got := argsText(c.Arguments); got != wantArgs {
					t.Errorf("call %d arguments = %s; want %s", i, got, wantArgs)
				}
			}
		})
	}
}

func argsText(v ast.Value) string {
	if v == nil {
		return ""
	}
	return v.String()
}

func TestParseMalformed(t *testing.T) {
	long := strings.Repeat("a", MaxToolName+1)
	for _, body := range []string{
		`"x"`, `7`, `null`, `[]`, `[1]`, `[[{"jsonrpc":"2.0","method":"ping"}]]`,
		`{"method":"ping"}`,
		`{"jsonrpc":"1.0","method":"ping"}`,
		`{"jsonrpc":2.0,"method":"ping"}`,
		`{"jsonrpc":"2.0","method":7}`,
		`{"jsonrpc":"2.0","method":null,"id":1}`,
		`{"jsonrpc":"2.0","method":"ping","id":{}}`,
		`{"jsonrpc":"2.0","method":"ping","id":true}`,
		`{"jsonrpc":"2.0","method":"ping","params":"x"}`,
		`{"jsonrpc":"2.0","id":1}`,
		`{"jsonrpc":"2.0","result":{}}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call"}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[]}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":7}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":""}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + long + `"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":[]}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/call"}]`,
	} {
		if _, err := Parse(value(t, body)); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%s) = %v; want ErrMalformed", body, err)
		}
	}
}

func TestTerm(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"tools/call", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"ticket.create","arguments":{"capability":"simulate"}}}`,
			`{"arguments": {"capability": "simulate"}, "id": 7, "method": "tools/call", "tool": "ticket.create"}`},
		{"tools/call without arguments", `{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"t"}}`,
			`{"id": "x", "method": "tools/call", "tool": "t"}`},
		{"no tool for other methods", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"name":"t"}}`,
			`{"id": 1, "method": "tools/list"}`},
		{"notification has no id", `{"jsonrpc":"2.0","method":"notifications/initialized"}`,
			`{"method": "notifications/initialized"}`},
		{"response", `{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"m"}}`,
			`{"id": null, "method": "", "response": true}`},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"a","arguments":{}}}]`,
			`{"batch": true, "calls": [{"batch": true, "id": 1, "method": "ping"}, {"arguments": {}, "batch": true, "id": 2, "method": "tools/call", "tool": "a"}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse(value(t, tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Term().String(); got != tt.want {
				t.Errorf("Term() = %s; want %s", got, tt.want)
			}
		})
	}
}

// TestTermOfHandMadeCall: a Call built without Parse still shows its id.
func TestTermOfHandMadeCall(t *testing.T) {
	r := &Request{Calls: []Call{{Method: "ping", ID: `"q"`}}}
	if got, want := r.Term().String(), `{"id": "q", "method": "ping"}`; got != want {
		t.Errorf("Term() = %s; want %s", got, want)
	}
}
