package fakemodel

import (
	"encoding/json"
	"errors"
	"net/http"
)

// anthropicRequest is what the fake reads of an Anthropic request.
type anthropicRequest struct {
	Model     *string         `json:"model"`
	MaxTokens *int64          `json:"max_tokens"`
	Stream    *bool           `json:"stream"`
	Messages  json.RawMessage `json:"messages"`
	System    json.RawMessage `json:"system"`
}

func (q *anthropicRequest) read(body []byte, needMax bool) error {
	if err := decode(body, q); err != nil {
		return err
	}
	switch {
	case q.Model == nil || *q.Model == "":
		return errors.New("model: Field required")
	case len(q.Messages) == 0:
		return errors.New("messages: Field required")
	case needMax && q.MaxTokens == nil:
		return errors.New("max_tokens: Field required")
	}
	return checkMax("max_tokens", q.MaxTokens)
}

func messages(w http.ResponseWriter, body []byte) error {
	var q anthropicRequest
	if err := q.read(body, true); err != nil {
		return err
	}
	in := inputTokens(q.Messages, q.System)
	out, cut := generate(q.MaxTokens)
	stop := "end_turn"
	if cut {
		stop = "max_tokens"
	}
	message := func(content []any, stop any, out int64) map[string]any {
		return map[string]any{"id": "msg_fake", "type": "message", "role": "assistant", "model": *q.Model,
			"content": content, "stop_reason": stop, "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": in, "output_tokens": out}}
	}
	if q.Stream == nil || !*q.Stream {
		writeJSON(w, http.StatusOK, message([]any{map[string]any{"type": "text", "text": text(out)}}, stop, out))
		return nil
	}
	s := startSSE(w)
	s.event("message_start", map[string]any{"type": "message_start", "message": message([]any{}, nil, 1)})
	s.event("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
		"content_block": map[string]any{"type": "text", "text": ""}})
	s.event("ping", map[string]any{"type": "ping"})
	for range out {
		s.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": "ok "}})
	}
	s.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	s.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": out}})
	s.event("message_stop", map[string]any{"type": "message_stop"})
	return nil
}

func countTokens(w http.ResponseWriter, body []byte) error {
	var q anthropicRequest
	if err := q.read(body, false); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"input_tokens": inputTokens(q.Messages, q.System)})
	return nil
}
