// Package fakemodel is a local model server for tests: it answers
// OpenAI's chat/completions, responses, completions and embeddings and
// Anthropic's messages and messages/count_tokens, streamed (server-sent
// events in each API's own event format) and not, with usage that is
// deterministic, and records every request it received so that a test can
// check what reached the upstream against its own log.
//
// Tokens are counted, not tokenized: a request's input is the byte length
// of its prompt's JSON (chat and Anthropic "messages", plus Anthropic's
// "system"; "input"; "prompt") divided by 4, at least 1; each answer
// generates min(its maximum, 7) tokens ("ok " each), 7 when it sets no
// maximum, for each of its n choices. An answer cut short by its maximum
// says so as the API does (finish_reason "length", status "incomplete",
// stop_reason "max_tokens"). The usage of an OpenAI chat/completions or
// completions stream is sent, in a last chunk, only when the request asks
// with stream_options.include_usage.
package fakemodel

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// Request is one request the server received.
type Request struct {
	Method, Path string
	Header       http.Header
	// Body is what was read of the body, at most MaxBody bytes.
	Body []byte
	// Complete is true when the body was read to its end: false for one
	// cut short (the client or a proxy gave up mid-body) or over MaxBody.
	// An incomplete request is answered 400 and never generates.
	Complete bool
}

// MaxBody bounds a request body the server reads.
const MaxBody = 16 << 20

// Generated is how many tokens an answer generates when its maximum does
// not cut it short.
const Generated = 7

// Server is the fake model server, an http.Handler; start it with
// httptest on 127.0.0.1. The zero value is not usable: call New.
type Server struct {
	mu   sync.Mutex
	reqs []Request
	// arrived is closed, and replaced, when a request is recorded.
	arrived chan struct{}
}

// New returns a server with no requests recorded.
func New() *Server {
	return &Server{arrived: make(chan struct{})}
}

// Requests returns a copy of the requests received so far, in order of
// arrival (of their whole bodies).
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

// Wait returns the requests received once there are at least n, or the
// context's error with how many had arrived.
func (s *Server) Wait(ctx context.Context, n int) ([]Request, error) {
	for {
		s.mu.Lock()
		reqs, arrived := slices.Clone(s.reqs), s.arrived
		s.mu.Unlock()
		if len(reqs) >= n {
			return reqs, nil
		}
		select {
		case <-arrived:
		case <-ctx.Done():
			return reqs, fmt.Errorf("fakemodel: %d of %d requests arrived: %w", len(reqs), n, ctx.Err())
		}
	}
}

func (s *Server) record(r Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, r)
	close(s.arrived)
	s.arrived = make(chan struct{})
}

// ServeHTTP records the request and answers it as the API its path names.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	complete := err == nil && len(body) <= MaxBody
	if len(body) > MaxBody {
		body = body[:MaxBody]
	}
	s.record(Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, Complete: complete})

	anthropic := strings.HasSuffix(r.URL.Path, "/messages") || strings.HasSuffix(r.URL.Path, "/messages/count_tokens")
	fail := openAIError
	if anthropic {
		fail = anthropicError
	}
	switch {
	case r.Method != http.MethodPost:
		fail(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed")
		return
	case !complete:
		fail(w, http.StatusBadRequest, "incomplete request body")
		return
	case r.Header.Get("Content-Encoding") != "":
		fail(w, http.StatusBadRequest, "unsupported Content-Encoding")
		return
	}
	answer, ok := routes[r.URL.Path]
	if !ok {
		fail(w, http.StatusNotFound, "no route "+r.URL.Path)
		return
	}
	if err := answer(w, body); err != nil {
		fail(w, http.StatusBadRequest, err.Error())
	}
}

// routes answer a request's body, or say why it is refused.
var routes = map[string]func(http.ResponseWriter, []byte) error{
	"/v1/chat/completions":      chat,
	"/v1/completions":           completions,
	"/v1/embeddings":            embeddings,
	"/v1/responses":             responses,
	"/v1/messages":              messages,
	"/v1/messages/count_tokens": countTokens,
}

// openAIError answers as OpenAI's API does.
func openAIError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{
		"message": msg, "type": "invalid_request_error", "param": nil, "code": nil,
	}})
}

// anthropicError answers as Anthropic's API does.
func anthropicError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]any{"type": "error", "error": map[string]any{
		"type": "invalid_request_error", "message": msg,
	}})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("fakemodel: marshal an answer: %v", err))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// sse writes server-sent events, flushed one by one.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func startSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

// event writes one event; typ "" writes no event: line, as OpenAI's chat
// streams do. data is marshalled unless it is a string.
func (s *sse) event(typ string, data any) {
	var b bytes.Buffer
	if typ != "" {
		fmt.Fprintf(&b, "event: %s\n", typ)
	}
	b.WriteString("data: ")
	if str, ok := data.(string); ok {
		b.WriteString(str)
	} else {
		j, err := json.Marshal(data)
		if err != nil {
			panic(fmt.Sprintf("fakemodel: marshal an event: %v", err))
		}
		b.Write(j)
	}
	b.WriteString("\n\n")
	_, _ = s.w.Write(b.Bytes())
	if s.f != nil {
		s.f.Flush()
	}
}

// inputTokens is the deterministic input count of a prompt's raw JSON.
func inputTokens(prompt ...json.RawMessage) int64 {
	n := 0
	for _, p := range prompt {
		n += len(p)
	}
	return max(1, int64(n/4))
}

// generate is how many tokens an answer with maximum max (nil: none)
// generates, and whether the maximum cut it short.
func generate(maxTokens *int64) (int64, bool) {
	if maxTokens == nil || *maxTokens >= Generated {
		return Generated, false
	}
	return *maxTokens, true
}

// text is the answer of n tokens.
func text(n int64) string {
	return strings.Repeat("ok ", int(n))
}

// checkMax refuses a maximum the APIs refuse.
func checkMax(name string, v *int64) error {
	if v != nil && *v < 1 {
		return fmt.Errorf("%s must be at least 1, got %d", name, *v)
	}
	return nil
}

// decode reads body into v as the APIs do: a JSON object.
func decode(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("we could not parse the JSON body of your request: %v", err)
	}
	return nil
}
