package fakemodel

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"net/http"
)

// created is every answer's creation time: answers are deterministic.
const created = 1700000000

// openAIRequest is what the fake reads of an OpenAI request.
type openAIRequest struct {
	Model               *string         `json:"model"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxOutputTokens     *int64          `json:"max_output_tokens"`
	N                   *int64          `json:"n"`
	Stream              *bool           `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	Messages            json.RawMessage `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	Input               json.RawMessage `json:"input"`
	EncodingFormat      string          `json:"encoding_format"`
}

type streamOptions struct {
	IncludeUsage *bool `json:"include_usage"`
}

func (q *openAIRequest) check(prompt string, raw json.RawMessage) error {
	switch {
	case q.Model == nil || *q.Model == "":
		return errors.New("you must provide a model parameter")
	case len(raw) == 0:
		return errors.New("missing required parameter: '" + prompt + "'")
	case q.StreamOptions != nil && (q.Stream == nil || !*q.Stream):
		return errors.New("the 'stream_options' parameter is only allowed when 'stream' is enabled")
	case q.N != nil && *q.N < 1:
		return errors.New("n must be at least 1")
	}
	for name, v := range map[string]*int64{"max_completion_tokens": q.MaxCompletionTokens, "max_tokens": q.MaxTokens, "max_output_tokens": q.MaxOutputTokens} {
		if err := checkMax(name, v); err != nil {
			return err
		}
	}
	return nil
}

func (q *openAIRequest) streamed() bool { return q.Stream != nil && *q.Stream }

func (q *openAIRequest) includeUsage() bool {
	return q.StreamOptions != nil && q.StreamOptions.IncludeUsage != nil && *q.StreamOptions.IncludeUsage
}

func (q *openAIRequest) choices() int64 {
	if q.N == nil {
		return 1
	}
	return *q.N
}

func usage(in, out int64) map[string]any {
	return map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out}
}

// finish is OpenAI's finish_reason.
func finish(cut bool) string {
	if cut {
		return "length"
	}
	return "stop"
}

func chat(w http.ResponseWriter, body []byte) error {
	var q openAIRequest
	if err := decode(body, &q); err != nil {
		return err
	}
	if err := q.check("messages", q.Messages); err != nil {
		return err
	}
	// The larger maximum bounds the answer: egressd assumes no more.
	limit := q.MaxCompletionTokens
	if limit == nil || q.MaxTokens != nil && *q.MaxTokens > *limit {
		limit = q.MaxTokens
	}
	in := inputTokens(q.Messages)
	out, cut := generate(limit)
	n := q.choices()
	if !q.streamed() {
		choices := make([]any, n)
		for i := range choices {
			choices[i] = map[string]any{"index": i, "logprobs": nil, "finish_reason": finish(cut),
				"message": map[string]any{"role": "assistant", "content": text(out), "refusal": nil}}
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": "chatcmpl-fake", "object": "chat.completion", "created": created,
			"model": *q.Model, "choices": choices, "usage": usage(in, out*n)})
		return nil
	}
	s := startSSE(w)
	chunk := func(choices []any) map[string]any {
		c := map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": created,
			"model": *q.Model, "choices": choices}
		if q.includeUsage() {
			c["usage"] = nil
		}
		return c
	}
	for i := range n {
		for range out {
			s.event("", chunk([]any{map[string]any{"index": i, "logprobs": nil, "finish_reason": nil,
				"delta": map[string]any{"role": "assistant", "content": "ok "}}}))
		}
		s.event("", chunk([]any{map[string]any{"index": i, "logprobs": nil, "finish_reason": finish(cut), "delta": map[string]any{}}}))
	}
	if q.includeUsage() {
		last := chunk([]any{})
		last["usage"] = usage(in, out*n)
		s.event("", last)
	}
	s.event("", "[DONE]")
	return nil
}

func completions(w http.ResponseWriter, body []byte) error {
	var q openAIRequest
	if err := decode(body, &q); err != nil {
		return err
	}
	if err := q.check("prompt", q.Prompt); err != nil {
		return err
	}
	in := inputTokens(q.Prompt)
	out, cut := generate(q.MaxTokens)
	n := q.choices()
	if !q.streamed() {
		choices := make([]any, n)
		for i := range choices {
			choices[i] = map[string]any{"index": i, "text": text(out), "logprobs": nil, "finish_reason": finish(cut)}
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": "cmpl-fake", "object": "text_completion", "created": created,
			"model": *q.Model, "choices": choices, "usage": usage(in, out*n)})
		return nil
	}
	s := startSSE(w)
	chunk := func(choices []any) map[string]any {
		return map[string]any{"id": "cmpl-fake", "object": "text_completion", "created": created, "model": *q.Model, "choices": choices}
	}
	for i := range n {
		for t := range out {
			var reason any
			if t == out-1 {
				reason = finish(cut)
			}
			s.event("", chunk([]any{map[string]any{"index": i, "text": "ok ", "logprobs": nil, "finish_reason": reason}}))
		}
	}
	if q.includeUsage() {
		last := chunk([]any{})
		last["usage"] = usage(in, out*n)
		s.event("", last)
	}
	s.event("", "[DONE]")
	return nil
}

// embedding is every input's vector.
var embedding = []float32{0.5, -0.25, 0.125}

func embeddings(w http.ResponseWriter, body []byte) error {
	var q openAIRequest
	if err := decode(body, &q); err != nil {
		return err
	}
	if err := q.check("input", q.Input); err != nil {
		return err
	}
	// One vector per string or token array of a list; one for a string
	// or a token array.
	count := 1
	var list []json.RawMessage
	if json.Unmarshal(q.Input, &list) == nil && len(list) > 0 && list[0][0] != '-' && (list[0][0] < '0' || list[0][0] > '9') {
		count = len(list)
	}
	var vec any = embedding
	if q.EncodingFormat == "base64" {
		b := make([]byte, 4*len(embedding))
		for i, f := range embedding {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
		}
		vec = base64.StdEncoding.EncodeToString(b)
	}
	data := make([]any, count)
	for i := range data {
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": vec}
	}
	in := inputTokens(q.Input)
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data, "model": *q.Model,
		"usage": map[string]any{"prompt_tokens": in, "total_tokens": in}})
	return nil
}

func responses(w http.ResponseWriter, body []byte) error {
	var q openAIRequest
	if err := decode(body, &q); err != nil {
		return err
	}
	if err := q.check("input", q.Input); err != nil {
		return err
	}
	in := inputTokens(q.Input)
	out, cut := generate(q.MaxOutputTokens)
	status, incomplete, terminal := "completed", any(nil), "response.completed"
	if cut {
		status, incomplete, terminal = "incomplete", map[string]any{"reason": "max_output_tokens"}, "response.incomplete"
	}
	part := func(t string) map[string]any {
		return map[string]any{"type": "output_text", "text": t, "annotations": []any{}, "logprobs": []any{}}
	}
	item := func(st string, content []any) map[string]any {
		return map[string]any{"type": "message", "id": "msg_fake", "status": st, "role": "assistant", "content": content}
	}
	response := func(st string, output []any, u any) map[string]any {
		r := map[string]any{"id": "resp_fake", "object": "response", "created_at": created, "status": st,
			"error": nil, "incomplete_details": nil, "instructions": nil, "max_output_tokens": q.MaxOutputTokens,
			"model": *q.Model, "output": output, "parallel_tool_calls": true, "temperature": 1.0,
			"tool_choice": "auto", "tools": []any{}, "top_p": 1.0, "usage": u}
		if st != "in_progress" {
			r["incomplete_details"] = incomplete
		}
		return r
	}
	final := response(status, []any{item("completed", []any{part(text(out))})}, map[string]any{
		"input_tokens": in, "input_tokens_details": map[string]any{"cached_tokens": 0},
		"output_tokens": out, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
		"total_tokens": in + out,
	})
	if !q.streamed() {
		writeJSON(w, http.StatusOK, final)
		return nil
	}
	s := startSSE(w)
	seq := 0
	ev := func(typ string, fields map[string]any) {
		fields["type"], fields["sequence_number"] = typ, seq
		seq++
		s.event(typ, fields)
	}
	ev("response.created", map[string]any{"response": response("in_progress", []any{}, nil)})
	ev("response.in_progress", map[string]any{"response": response("in_progress", []any{}, nil)})
	ev("response.output_item.added", map[string]any{"output_index": 0, "item": item("in_progress", []any{})})
	ev("response.content_part.added", map[string]any{"item_id": "msg_fake", "output_index": 0, "content_index": 0, "part": part("")})
	for range out {
		ev("response.output_text.delta", map[string]any{"item_id": "msg_fake", "output_index": 0, "content_index": 0, "delta": "ok ", "logprobs": []any{}})
	}
	ev("response.output_text.done", map[string]any{"item_id": "msg_fake", "output_index": 0, "content_index": 0, "text": text(out), "logprobs": []any{}})
	ev("response.content_part.done", map[string]any{"item_id": "msg_fake", "output_index": 0, "content_index": 0, "part": part(text(out))})
	ev("response.output_item.done", map[string]any{"output_index": 0, "item": item("completed", []any{part(text(out))})})
	ev(terminal, map[string]any{"response": final})
	return nil
}
