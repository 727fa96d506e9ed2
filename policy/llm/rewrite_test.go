package llm_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/egressd/egressd/policy/llm"
)

// decodeAny decodes a body as the lead's parser does, for comparing
// documents.
func decodeAny(t *testing.T, b []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var x any
	if err := d.Decode(&x); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return x
}

func TestRewrite(t *testing.T) {
	tests := []struct {
		name, path, body string
		setMax           int64
		wantUsage        bool
		want             string // the document sent
	}{
		{name: "nothing to do", path: "/v1/chat/completions", body: `{"model":"m","max_tokens":10}`,
			want: `{"max_tokens":10,"model":"m"}`},
		{name: "clamp the field set", path: "/v1/chat/completions", body: `{"model":"m","max_tokens":1000}`, setMax: 100,
			want: `{"max_tokens":100,"model":"m"}`},
		{name: "clamp both fields", path: "/v1/chat/completions", body: `{"model":"m","max_tokens":1000,"max_completion_tokens":10}`, setMax: 100,
			want: `{"max_completion_tokens":100,"max_tokens":100,"model":"m"}`},
		{name: "set the current field when none", path: "/v1/chat/completions", body: `{"model":"m","max_tokens":null}`, setMax: 100,
			want: `{"max_completion_tokens":100,"max_tokens":null,"model":"m"}`},
		{name: "responses", path: "/v1/responses", body: `{"model":"m"}`, setMax: 64,
			want: `{"max_output_tokens":64,"model":"m"}`},
		{name: "anthropic", path: "/v1/messages", body: `{"model":"m","max_tokens":4096,"stream":true}`, setMax: 64, wantUsage: true,
			want: `{"max_tokens":64,"model":"m","stream":true}`},
		{name: "ask a chat stream for usage", path: "/v1/chat/completions", body: `{"model":"m","stream":true}`, wantUsage: true,
			want: `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`},
		{name: "keep other stream options", path: "/v1/completions", body: `{"model":"m","stream":true,"stream_options":{"include_obfuscation":false,"include_usage":false}}`, wantUsage: true,
			want: `{"model":"m","stream":true,"stream_options":{"include_obfuscation":false,"include_usage":true}}`},
		{name: "replace null stream options", path: "/v1/completions", body: `{"model":"m","stream":true,"stream_options":null}`, wantUsage: true,
			want: `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`},
		{name: "no usage to ask of a JSON answer", path: "/v1/chat/completions", body: `{"model":"m"}`, wantUsage: true,
			want: `{"model":"m"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := "openai"
			if strings.HasSuffix(tt.path, "/messages") {
				api = "anthropic"
			}
			v := parseBody(t, []byte(tt.body))
			r, err := llm.Parse(api, tt.path, v)
			if err != nil {
				t.Fatal(err)
			}
			got, err := llm.Rewrite(v, r, tt.setMax, tt.wantUsage)
			if err != nil {
				t.Fatalf("Rewrite = %v", err)
			}
			if string(got) != tt.want {
				t.Errorf("Rewrite(%s) = %s; want %s", tt.body, got, tt.want)
			}
			// What is sent parses to the request decided, with the
			// maximum set and usage asked for.
			again, err := llm.Parse(api, tt.path, parseBody(t, got))
			if err != nil {
				t.Fatalf("Parse of the rewritten body: %v", err)
			}
			want := *r
			if tt.setMax != 0 {
				// Both chat maxima set alike: the tie names
				// max_completion_tokens.
				want.MaxOutputTokens, want.HasMax, want.MaxField = tt.setMax, true, again.MaxField
			}
			want.IncludeUsage = want.IncludeUsage || tt.wantUsage
			if *again != want {
				t.Errorf("Parse of the rewritten body = %+v; want %+v", *again, want)
			}
		})
	}
}

// TestRewriteKeepsTheDocument: a body is sent as the same document, its
// numbers as their literal text and its strings as the same strings.
func TestRewriteKeepsTheDocument(t *testing.T) {
	body := `{"model":"gpt-4o","temperature":1.0,"seed":12345678901234567890123,"top_p":1e-3,"messages":[{"role":"user",` +
		`"content":"<b>&amp;</b> \"quoted\" \\ tab\t nl\n ctl\u0001 \u2028 \u00e9t\u00e9 😀 \ud83d\ude00"}],"stop":null,"logprobs":false,"tools":[]}`
	v := parseBody(t, []byte(body))
	r, err := llm.Parse("openai", "/v1/chat/completions", v)
	if err != nil {
		t.Fatal(err)
	}
	got, err := llm.Rewrite(v, r, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(decodeAny(t, got), decodeAny(t, []byte(body))) {
		t.Errorf("Rewrite sent %s; a document other than %s", got, body)
	}
	for _, lit := range []string{`"temperature":1.0`, `"seed":12345678901234567890123`, `"top_p":1e-3`, `<b>&amp;</b>`} {
		if !bytes.Contains(got, []byte(lit)) {
			t.Errorf("Rewrite sent %s; want %s as it was", got, lit)
		}
	}
}

func TestRewriteRefuses(t *testing.T) {
	v := parseBody(t, []byte(`{"model":"e","input":"x"}`))
	r, err := llm.Parse("openai", "/v1/embeddings", v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := llm.Rewrite(v, r, 10, false); err == nil {
		t.Error("Rewrite set a maximum on embeddings")
	}
	v = parseBody(t, []byte(`{"model":"m"}`))
	if r, err = llm.Parse("openai", "/v1/chat/completions", v); err != nil {
		t.Fatal(err)
	}
	for _, m := range []int64{-1, llm.MaxTokenValue + 1} {
		if _, err := llm.Rewrite(v, r, m, false); err == nil {
			t.Errorf("Rewrite set a maximum of %d", m)
		}
	}
}
