package fakemodel_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/internal/fakemodel"
)

func start(t *testing.T) (*fakemodel.Server, string) {
	t.Helper()
	fake := fakemodel.New()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return fake, srv.URL
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestAnswers(t *testing.T) {
	_, url := start(t)
	msgs := `[{"role":"user","content":"twelve bytes and more"}]` // 50 bytes: 12 tokens
	tests := []struct {
		name, path, body string
		code             int
		want             []string // substrings of the answer
	}{
		{"chat", "/v1/chat/completions", `{"model":"m","messages":` + msgs + `}`, 200,
			[]string{`"prompt_tokens":12`, `"completion_tokens":7`, `"finish_reason":"stop"`}},
		{"chat cut short", "/v1/chat/completions", `{"model":"m","messages":` + msgs + `,"max_completion_tokens":3}`, 200,
			[]string{`"completion_tokens":3`, `"finish_reason":"length"`}},
		{"chat two choices", "/v1/chat/completions", `{"model":"m","messages":` + msgs + `,"max_tokens":2,"n":2}`, 200,
			[]string{`"completion_tokens":4`, `"index":1`}},
		{"chat stream without usage", "/v1/chat/completions", `{"model":"m","messages":` + msgs + `,"stream":true}`, 200,
			[]string{"data: [DONE]\n\n", `"object":"chat.completion.chunk"`}},
		{"chat stream with usage", "/v1/chat/completions", `{"model":"m","messages":` + msgs + `,"stream":true,"stream_options":{"include_usage":true}}`, 200,
			[]string{`"choices":[],"created":1700000000,"id":"chatcmpl-fake","model":"m","object":"chat.completion.chunk","usage":{"completion_tokens":7,"prompt_tokens":12,"total_tokens":19}}`}},
		{"responses incomplete", "/v1/responses", `{"model":"m","input":"x","max_output_tokens":2,"stream":true}`, 200,
			[]string{"event: response.incomplete\n", `"status":"incomplete"`, `"output_tokens":2`}},
		{"messages", "/v1/messages", `{"model":"c","max_tokens":100,"messages":` + msgs + `}`, 200,
			[]string{`"input_tokens":12`, `"output_tokens":7`, `"stop_reason":"end_turn"`}},
		{"messages stream", "/v1/messages", `{"model":"c","max_tokens":1,"messages":` + msgs + `,"stream":true}`, 200,
			[]string{"event: message_start\n", `"stop_reason":"max_tokens"`, "event: message_stop\n"}},
		{"count_tokens", "/v1/messages/count_tokens", `{"model":"c","messages":` + msgs + `}`, 200, []string{`{"input_tokens":12}`}},

		{"no model", "/v1/chat/completions", `{"messages":[]}`, 400, []string{`"type":"invalid_request_error"`, `"error":{`}},
		{"stream_options without a stream", "/v1/chat/completions", `{"model":"m","messages":[],"stream_options":{"include_usage":true}}`, 400, []string{"stream_options"}},
		{"zero maximum", "/v1/responses", `{"model":"m","input":"x","max_output_tokens":0}`, 400, []string{"max_output_tokens"}},
		{"anthropic without max_tokens", "/v1/messages", `{"model":"c","messages":[]}`, 400, []string{`"type":"error"`, "max_tokens"}},
		{"not JSON", "/v1/embeddings", `{`, 400, []string{"parse"}},
		{"no route", "/v1/images/generations", `{}`, 404, []string{"no route"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := post(t, url+tt.path, tt.body)
			if code != tt.code {
				t.Fatalf("POST %s %s = %d %s; want %d", tt.path, tt.body, code, body, tt.code)
			}
			for _, w := range tt.want {
				if !strings.Contains(body, w) {
					t.Errorf("POST %s answer %s; want it to contain %s", tt.path, body, w)
				}
			}
		})
	}
}

func TestRecords(t *testing.T) {
	fake, url := start(t)
	body := `{"model":"m","input":["a","b"],"encoding_format":"base64"}`
	code, answer := post(t, url+"/v1/embeddings", body)
	var e struct {
		Data []struct{ Embedding string }
	}
	if code != 200 || json.Unmarshal([]byte(answer), &e) != nil || len(e.Data) != 2 || e.Data[0].Embedding != "AAAAPwAAgL4AAAA+" {
		t.Errorf("embeddings = %d %s; want two base64 vectors", code, answer)
	}
	resp, err := http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET = %d; want 405", resp.StatusCode)
	}

	// A body cut short: Content-Length promises more than is sent.
	addr := strings.TrimPrefix(url, "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\":\"m\"", addr)
	c.(*net.TCPConn).CloseWrite()
	_, _ = bufio.NewReader(c).ReadString('\n')
	c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reqs, err := fake.Wait(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if r := reqs[0]; r.Method != "POST" || r.Path != "/v1/embeddings" || string(r.Body) != body || !r.Complete || r.Header.Get("Content-Type") != "application/json" {
		t.Errorf("recorded %+v; want the whole embeddings POST", r)
	}
	if r := reqs[1]; r.Method != "GET" || !r.Complete {
		t.Errorf("recorded %+v; want the GET", r)
	}
	if r := reqs[2]; r.Complete || string(r.Body) != `{"model":"m"` {
		t.Errorf("recorded %+v; want an incomplete body", r)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := fake.Wait(ctx, 4); err == nil || !strings.Contains(err.Error(), "3 of 4") {
		t.Errorf("Wait for a request never sent = %v; want 3 of 4 arrived", err)
	}
}
