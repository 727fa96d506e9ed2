package llm_test

import (
	"errors"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/egressd/egressd/policy/llm"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name, api, path, body string
		want                  llm.Request
		err                   error
	}{
		{name: "chat", api: "openai", path: "/v1/chat/completions", body: `{"model":"gpt-4o","max_completion_tokens":10,"messages":[]}`,
			want: llm.Request{Endpoint: "chat/completions", Model: "gpt-4o", MaxOutputTokens: 10, HasMax: true, MaxField: "max_completion_tokens", Choices: 1, IncludeUsage: true}},
		{name: "chat without /v1", api: "openai", path: "/chat/completions", body: `{"model":"m"}`,
			want: llm.Request{Endpoint: "chat/completions", Model: "m", Choices: 1, IncludeUsage: true}},
		{name: "chat under a gateway prefix", api: "openai", path: "/openai/v1/chat/completions", body: `{"model":"m","max_tokens":5}`,
			want: llm.Request{Endpoint: "chat/completions", Model: "m", MaxOutputTokens: 5, HasMax: true, MaxField: "max_tokens", Choices: 1, IncludeUsage: true}},
		{name: "chat both maxima: the larger", api: "openai", path: "/v1/chat/completions", body: `{"model":"m","max_completion_tokens":10,"max_tokens":500}`,
			want: llm.Request{Endpoint: "chat/completions", Model: "m", MaxOutputTokens: 500, HasMax: true, MaxField: "max_tokens", Choices: 1, IncludeUsage: true}},
		{name: "chat both maxima equal", api: "openai", path: "/v1/chat/completions", body: `{"model":"m","max_completion_tokens":7,"max_tokens":7}`,
			want: llm.Request{Endpoint: "chat/completions", Model: "m", MaxOutputTokens: 7, HasMax: true, MaxField: "max_completion_tokens", Choices: 1, IncludeUsage: true}},
		{name: "chat null maximum is none", api: "openai", path: "/v1/chat/completions", body: `{"model":"m","max_completion_tokens":null,"max_tokens":3}`,
			want: llm.Request{Endpoint: "chat/completions", Model: "m", MaxOutputTokens: 3, HasMax: true, MaxField: "max_tokens", Choices: 1, IncludeUsage: true}},
		{name: "chat stream", api: "openai", path: "/v1/chat/completions", body: `{"model":"m","stream":true,"n":3}`,
			want: llm.Request{Endpoint: "chat/completions", Model: "m", Choices: 3, Stream: true}},
		{name: "chat stream with usage", api: "openai", path: "/v1/chat/completions", body: `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`,
			want: llm.Request{Endpoint: "chat/completions", Model: "m", Choices: 1, Stream: true, IncludeUsage: true}},
		{name: "chat stream options null", api: "openai", path: "/v1/chat/completions", body: `{"model":"m","stream":true,"stream_options":null}`,
			want: llm.Request{Endpoint: "chat/completions", Model: "m", Choices: 1, Stream: true}},
		{name: "responses", api: "openai", path: "/v1/responses", body: `{"model":"gpt-5","max_output_tokens":64,"stream":true}`,
			want: llm.Request{Endpoint: "responses", Model: "gpt-5", MaxOutputTokens: 64, HasMax: true, MaxField: "max_output_tokens", Choices: 1, Stream: true, IncludeUsage: true}},
		{name: "responses ignores max_tokens", api: "openai", path: "/v1/responses", body: `{"model":"m","max_tokens":64}`,
			want: llm.Request{Endpoint: "responses", Model: "m", Choices: 1, IncludeUsage: true}},
		{name: "completions best_of", api: "openai", path: "/v1/completions", body: `{"model":"m","max_tokens":16,"n":2,"best_of":5}`,
			want: llm.Request{Endpoint: "completions", Model: "m", MaxOutputTokens: 16, HasMax: true, MaxField: "max_tokens", Choices: 5, IncludeUsage: true}},
		{name: "embeddings", api: "openai", path: "/v1/embeddings", body: `{"model":"e","input":"x","stream":"ignored"}`,
			want: llm.Request{Endpoint: "embeddings", Model: "e", HasMax: true, Choices: 1, IncludeUsage: true}},
		{name: "messages", api: "anthropic", path: "/v1/messages", body: `{"model":"claude","max_tokens":1024,"stream":false}`,
			want: llm.Request{Endpoint: "messages", Model: "claude", MaxOutputTokens: 1024, HasMax: true, MaxField: "max_tokens", Choices: 1, IncludeUsage: true}},
		{name: "messages n is not Anthropic's", api: "anthropic", path: "/v1/messages", body: `{"model":"claude","max_tokens":1,"n":5}`,
			want: llm.Request{Endpoint: "messages", Model: "claude", MaxOutputTokens: 1, HasMax: true, MaxField: "max_tokens", Choices: 1, IncludeUsage: true}},
		{name: "count_tokens", api: "anthropic", path: "/v1/messages/count_tokens", body: `{"model":"claude","messages":[]}`,
			want: llm.Request{Endpoint: "messages/count_tokens", Model: "claude", HasMax: true, Choices: 1, IncludeUsage: true}},

		{name: "unknown api", api: "gemini", path: "/v1/chat/completions", body: `{"model":"m"}`, err: llm.ErrUnknownEndpoint},
		{name: "anthropic path on openai", api: "openai", path: "/v1/messages", body: `{"model":"m"}`, err: llm.ErrUnknownEndpoint},
		{name: "openai path on anthropic", api: "anthropic", path: "/v1/chat/completions", body: `{"model":"m"}`, err: llm.ErrUnknownEndpoint},
		{name: "sub-resource", api: "openai", path: "/v1/responses/compact", body: `{"model":"m"}`, err: llm.ErrUnknownEndpoint},
		{name: "trailing slash", api: "openai", path: "/v1/chat/completions/", body: `{"model":"m"}`, err: llm.ErrUnknownEndpoint},
		{name: "escaped slash", api: "openai", path: "/v1/chat%2Fcompletions", body: `{"model":"m"}`, err: llm.ErrUnknownEndpoint},
		{name: "dot segment", api: "openai", path: "/v1/chat/./completions", body: `{"model":"m"}`, err: llm.ErrUnknownEndpoint},
		{name: "empty segment", api: "openai", path: "/v1//completions", body: `{"model":"m"}`, err: llm.ErrUnknownEndpoint},
		{name: "matrix parameter", api: "openai", path: "/v1/chat;x/completions", body: `{"model":"m"}`, err: llm.ErrUnknownEndpoint},
		{name: "chat in another case", api: "openai", path: "/v1/Chat/completions", body: `{"model":"m"}`, err: llm.ErrUnknownEndpoint},
		{name: "no leading slash", api: "openai", path: "v1/completions", body: `{"model":"m"}`, err: llm.ErrUnknownEndpoint},
		{name: "prefix glued", api: "openai", path: "/v1/xcompletions", body: `{"model":"m"}`, err: llm.ErrUnknownEndpoint},

		{name: "not an object", api: "openai", path: "/v1/chat/completions", body: `[]`, err: llm.ErrMalformed},
		{name: "no model", api: "openai", path: "/v1/chat/completions", body: `{}`, err: llm.ErrMalformed},
		{name: "null model", api: "openai", path: "/v1/chat/completions", body: `{"model":null}`, err: llm.ErrMalformed},
		{name: "empty model", api: "openai", path: "/v1/chat/completions", body: `{"model":""}`, err: llm.ErrMalformed},
		{name: "number model", api: "openai", path: "/v1/chat/completions", body: `{"model":4}`, err: llm.ErrMalformed},
		{name: "fractional maximum", api: "openai", path: "/v1/chat/completions", body: `{"model":"m","max_tokens":10.5}`, err: llm.ErrMalformed},
		{name: "integral fraction", api: "openai", path: "/v1/chat/completions", body: `{"model":"m","max_tokens":10.0}`, err: llm.ErrMalformed},
		{name: "exponent", api: "anthropic", path: "/v1/messages", body: `{"model":"m","max_tokens":1e3}`, err: llm.ErrMalformed},
		{name: "negative", api: "openai", path: "/v1/responses", body: `{"model":"m","max_output_tokens":-1}`, err: llm.ErrMalformed},
		{name: "zero", api: "anthropic", path: "/v1/messages", body: `{"model":"m","max_tokens":0}`, err: llm.ErrMalformed},
		{name: "huge", api: "openai", path: "/v1/completions", body: `{"model":"m","max_tokens":99999999999999999999999}`, err: llm.ErrMalformed},
		{name: "over the bound", api: "openai", path: "/v1/completions", body: `{"model":"m","max_tokens":1073741825}`, err: llm.ErrMalformed},
		{name: "string maximum", api: "openai", path: "/v1/chat/completions", body: `{"model":"m","max_completion_tokens":"10"}`, err: llm.ErrMalformed},
		{name: "n zero", api: "openai", path: "/v1/chat/completions", body: `{"model":"m","n":0}`, err: llm.ErrMalformed},
		{name: "n huge", api: "openai", path: "/v1/chat/completions", body: `{"model":"m","n":100000}`, err: llm.ErrMalformed},
		{name: "stream string", api: "openai", path: "/v1/chat/completions", body: `{"model":"m","stream":"true"}`, err: llm.ErrMalformed},
		{name: "stream_options string", api: "openai", path: "/v1/chat/completions", body: `{"model":"m","stream":true,"stream_options":"x"}`, err: llm.ErrMalformed},
		{name: "model in another case", api: "openai", path: "/v1/chat/completions", body: `{"model":"allowed","Model":"other"}`, err: llm.ErrMalformed},
		{name: "maximum with a Kelvin sign", api: "anthropic", path: "/v1/messages", body: `{"model":"m","max_tokens":5,"max_to\u212aens":99999}`, err: llm.ErrMalformed},
		{name: "include_usage in another case", api: "openai", path: "/v1/chat/completions", body: `{"model":"m","stream":true,"stream_options":{"Include_Usage":true}}`, err: llm.ErrMalformed},
		{name: "include_usage number", api: "openai", path: "/v1/completions", body: `{"model":"m","stream":true,"stream_options":{"include_usage":1}}`, err: llm.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := llm.Parse(tt.api, tt.path, parseBody(t, []byte(tt.body)))
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("Parse(%s, %s) = %+v, %v; want %v", tt.path, tt.body, got, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%s, %s) = %v", tt.path, tt.body, err)
			}
			tt.want.API = tt.api
			if *got != tt.want {
				t.Errorf("Parse(%s, %s) = %+v; want %+v", tt.path, tt.body, *got, tt.want)
			}
		})
	}
}

func TestTerm(t *testing.T) {
	r := llm.Request{API: "openai", Endpoint: "chat/completions", Model: "gpt-4o", MaxOutputTokens: 100, HasMax: true, MaxField: "max_tokens", Choices: 2, Stream: true}
	want := ast.MustParseTerm(`{"api":"openai","endpoint":"chat/completions","model":"gpt-4o","max_output_tokens":100,"choices":2,"stream":true}`)
	if got := r.Term(); !got.Equal(want) {
		t.Errorf("Term() = %v; want %v", got, want)
	}
	r.HasMax, r.MaxOutputTokens = false, 0
	want = ast.MustParseTerm(`{"api":"openai","endpoint":"chat/completions","model":"gpt-4o","choices":2,"stream":true}`)
	if got := r.Term(); !got.Equal(want) {
		t.Errorf("Term() without a maximum = %v; want %v", got, want)
	}
	if got := (&llm.Request{MaxOutputTokens: 100, Choices: 3}).Reserve(); got != 300 {
		t.Errorf("Reserve() = %d; want 300", got)
	}
}

func TestModelMatches(t *testing.T) {
	tests := []struct {
		globs []string
		model string
		want  bool
	}{
		{[]string{"gpt-4o"}, "gpt-4o", true},
		{[]string{"gpt-4o"}, "gpt-4o-mini", false},
		{[]string{"gpt-4o*"}, "gpt-4o-mini", true},
		{[]string{"*"}, "", true},
		{[]string{"*"}, "anything", true},
		{[]string{"claude-*-4-5"}, "claude-sonnet-4-5", true},
		{[]string{"claude-*-4-5"}, "claude-sonnet-4-5-20250929", false},
		{[]string{"claude-*-4-5*"}, "claude-sonnet-4-5-20250929", true},
		{[]string{"a*b*c"}, "abc", true},
		{[]string{"a*b*c"}, "ac", false},
		{[]string{"a*bb*b"}, "abbb", true},
		{[]string{"a*bb*b"}, "abb", false},
		{[]string{"ab*ba"}, "aba", false},
		{[]string{"*x*"}, "axb", true},
		{[]string{"**"}, "q", true},
		{[]string{"o1", "o3*"}, "o3-mini", true},
		{nil, "gpt-4o", false},
		{[]string{"GPT-4o"}, "gpt-4o", false},
	}
	for _, tt := range tests {
		if got := llm.ModelMatches(tt.globs, tt.model); got != tt.want {
			t.Errorf("ModelMatches(%q, %q) = %v; want %v", tt.globs, tt.model, got, tt.want)
		}
	}
}
