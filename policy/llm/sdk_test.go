package llm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/egressd/egressd/internal/fakemodel"
	"github.com/egressd/egressd/policy/llm"
)

// meter stands where the proxy will: between an official SDK and the
// fake model server, it parses each request body as the proxy does, may
// rewrite it, and reads the usage of each answer while the SDK reads it.
type meter struct {
	t       *testing.T
	api     string
	upRT    http.RoundTripper
	rewrite func(*llm.Request) (setMax int64, wantUsage bool)

	mu      sync.Mutex
	parsed  []*llm.Request
	sent    [][]byte // the bodies forwarded
	usages  []llm.Usage
	settled chan struct{} // one value per answer whose usage was read
}

func (m *meter) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	v := parseBody(m.t, body)
	r, err := llm.Parse(m.api, req.URL.EscapedPath(), v)
	if err != nil {
		m.t.Errorf("Parse(%s, %s, %s) = %v", m.api, req.URL.EscapedPath(), body, err)
		return nil, err
	}
	if m.rewrite != nil {
		setMax, want := m.rewrite(r)
		if body, err = llm.Rewrite(v, r, setMax, want); err != nil {
			m.t.Errorf("Rewrite: %v", err)
			return nil, err
		}
	}
	m.mu.Lock()
	m.parsed = append(m.parsed, r)
	m.sent = append(m.sent, body)
	m.mu.Unlock()
	req = req.Clone(req.Context())
	req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	resp, err := m.upRT.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	done := func(u llm.Usage) {
		m.mu.Lock()
		m.usages = append(m.usages, u)
		m.mu.Unlock()
		m.settled <- struct{}{}
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "text/event-stream" {
		resp.Body = llm.UsageSSE(r.API, r.Endpoint, resp.Body, done).(io.ReadCloser)
		return resp, nil
	}
	answer, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	done(llm.UsageJSON(r.API, r.Endpoint, answer))
	resp.Body = io.NopCloser(bytes.NewReader(answer))
	return resp, nil
}

// parseBody is the proxy's parse, as the lead's strict parser hands it
// over: numbers as their literal text.
func parseBody(t *testing.T, body []byte) ast.Value {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var x any
	if err := d.Decode(&x); err != nil {
		t.Fatalf("request body %s: %v", body, err)
	}
	v, err := ast.InterfaceToValue(x)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// last waits for the usage of the latest answer and returns it with the
// request the meter parsed.
func (m *meter) last() (*llm.Request, []byte, llm.Usage) {
	m.t.Helper()
	select {
	case <-m.settled:
	case <-time.After(10 * time.Second):
		m.t.Fatal("no usage was settled")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.parsed[len(m.parsed)-1], m.sent[len(m.sent)-1], m.usages[len(m.usages)-1]
}

// setup starts a fake model server and a meter in front of it.
func setup(t *testing.T, api string) (*fakemodel.Server, *meter, string) {
	fake := fakemodel.New()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return fake, &meter{t: t, api: api, upRT: srv.Client().Transport, settled: make(chan struct{}, 16)}, srv.URL
}

func openAIClient(m *meter, url string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("sk-test"),
		option.WithHTTPClient(&http.Client{Transport: m}), option.WithMaxRetries(0))
}

func anthropicClient(m *meter, url string) anthropic.Client {
	return anthropic.NewClient(anthropicoption.WithBaseURL(url), anthropicoption.WithAPIKey("sk-ant-test"),
		anthropicoption.WithHTTPClient(&http.Client{Transport: m}), anthropicoption.WithMaxRetries(0))
}

// checkRequest compares what Parse read with what the test asked the SDK
// for.
func checkRequest(t *testing.T, got *llm.Request, want llm.Request) {
	t.Helper()
	if *got != want {
		t.Errorf("Parse read %+v; want %+v", *got, want)
	}
}

// checkUsage compares the meter's usage with the SDK's.
func checkUsage(t *testing.T, got llm.Usage, in, out int64) {
	t.Helper()
	if want := (llm.Usage{Input: in, Output: out, Found: true}); got != want {
		t.Errorf("usage read = %+v; the SDK reports %+v", got, want)
	}
	if out == 0 && in == 0 {
		t.Error("the SDK reports no usage: the comparison proves nothing")
	}
}

// checkReceived checks the fake server received the body the meter sent,
// whole.
func checkReceived(t *testing.T, fake *fakemodel.Server, sent []byte) {
	t.Helper()
	reqs := fake.Requests()
	if len(reqs) == 0 {
		t.Fatal("the server received nothing")
	}
	got := reqs[len(reqs)-1]
	if !got.Complete || !bytes.Equal(got.Body, sent) {
		t.Errorf("the server received %q (complete %v); sent %q", got.Body, got.Complete, sent)
	}
}

func TestSDKChatCompletions(t *testing.T) {
	ctx := context.Background()
	fake, m, url := setup(t, llm.APIOpenAI)
	client := openAIClient(m, url)
	msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("How many tokens is this prompt?")}

	t.Run("json", func(t *testing.T) {
		m.t = t
		c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini", Messages: msgs, MaxCompletionTokens: openai.Int(5)})
		if err != nil {
			t.Fatal(err)
		}
		r, sent, u := m.last()
		checkRequest(t, r, llm.Request{API: "openai", Endpoint: "chat/completions", Model: "gpt-4o-mini", MaxOutputTokens: 5, HasMax: true,
			MaxField: "max_completion_tokens", Choices: 1, IncludeUsage: true})
		checkUsage(t, u, c.Usage.PromptTokens, c.Usage.CompletionTokens)
		checkReceived(t, fake, sent)
	})
	t.Run("legacy max_tokens and n", func(t *testing.T) {
		m.t = t
		c, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini", Messages: msgs, MaxTokens: openai.Int(3), N: openai.Int(2)})
		if err != nil {
			t.Fatal(err)
		}
		r, _, u := m.last()
		checkRequest(t, r, llm.Request{API: "openai", Endpoint: "chat/completions", Model: "gpt-4o-mini", MaxOutputTokens: 3, HasMax: true,
			MaxField: "max_tokens", Choices: 2, IncludeUsage: true})
		checkUsage(t, u, c.Usage.PromptTokens, c.Usage.CompletionTokens)
		if u.Output > r.Reserve() {
			t.Errorf("output %d over the reservation %d", u.Output, r.Reserve())
		}
	})
	t.Run("stream with usage", func(t *testing.T) {
		m.t = t
		s := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "gpt-4.1", Messages: msgs,
			MaxCompletionTokens: openai.Int(100), StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
		var acc openai.ChatCompletionAccumulator
		for s.Next() {
			acc.AddChunk(s.Current())
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		s.Close()
		r, _, u := m.last()
		checkRequest(t, r, llm.Request{API: "openai", Endpoint: "chat/completions", Model: "gpt-4.1", MaxOutputTokens: 100, HasMax: true,
			MaxField: "max_completion_tokens", Choices: 1, Stream: true, IncludeUsage: true})
		checkUsage(t, u, acc.Usage.PromptTokens, acc.Usage.CompletionTokens)
		if acc.Choices[0].Message.Content != "ok ok ok ok ok ok ok " {
			t.Errorf("the SDK read %q through the meter", acc.Choices[0].Message.Content)
		}
	})
	t.Run("stream without usage", func(t *testing.T) {
		m.t = t
		s := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "gpt-4.1", Messages: msgs, MaxCompletionTokens: openai.Int(100)})
		for s.Next() {
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		s.Close()
		r, _, u := m.last()
		if r.IncludeUsage || u.Found {
			t.Errorf("IncludeUsage = %v, usage %+v; want false, not found", r.IncludeUsage, u)
		}
	})
	t.Run("stream asked for usage and clamped", func(t *testing.T) {
		m.t = t
		m.rewrite = func(r *llm.Request) (int64, bool) { return 2, !r.IncludeUsage }
		defer func() { m.rewrite = nil }()
		s := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "gpt-4.1", Messages: msgs,
			MaxCompletionTokens: openai.Int(100), StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeObfuscation: openai.Bool(false)}})
		var acc openai.ChatCompletionAccumulator
		for s.Next() {
			acc.AddChunk(s.Current())
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		s.Close()
		_, sent, u := m.last()
		checkReceived(t, fake, sent)
		checkUsage(t, u, acc.Usage.PromptTokens, acc.Usage.CompletionTokens)
		if u.Output != 2 || acc.Choices[0].FinishReason != "length" {
			t.Errorf("clamped to 2: output %d, finish %q", u.Output, acc.Choices[0].FinishReason)
		}
		var q struct {
			StreamOptions map[string]bool `json:"stream_options"`
		}
		if err := json.Unmarshal(sent, &q); err != nil || !q.StreamOptions["include_usage"] || q.StreamOptions["include_obfuscation"] {
			t.Errorf("stream_options sent = %v (%v); want include_usage added, include_obfuscation kept", q.StreamOptions, err)
		}
	})
}

func TestSDKCompletions(t *testing.T) {
	ctx := context.Background()
	fake, m, url := setup(t, llm.APIOpenAI)
	client := openAIClient(m, url)
	prompt := openai.CompletionNewParamsPromptUnion{OfString: openai.String("Say this is a test")}

	c, err := client.Completions.New(ctx, openai.CompletionNewParams{Model: "gpt-3.5-turbo-instruct", Prompt: prompt, MaxTokens: openai.Int(4)})
	if err != nil {
		t.Fatal(err)
	}
	r, _, u := m.last()
	checkRequest(t, r, llm.Request{API: "openai", Endpoint: "completions", Model: "gpt-3.5-turbo-instruct", MaxOutputTokens: 4, HasMax: true,
		MaxField: "max_tokens", Choices: 1, IncludeUsage: true})
	checkUsage(t, u, c.Usage.PromptTokens, c.Usage.CompletionTokens)

	// A stream that did not ask for usage, asked by the meter.
	m.rewrite = func(r *llm.Request) (int64, bool) { return 0, !r.IncludeUsage }
	s := client.Completions.NewStreaming(ctx, openai.CompletionNewParams{Model: "gpt-3.5-turbo-instruct", Prompt: prompt, MaxTokens: openai.Int(50)})
	var usage openai.CompletionUsage
	for s.Next() {
		if ch := s.Current(); ch.JSON.Usage.Valid() {
			usage = ch.Usage
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	r, sent, u := m.last()
	checkReceived(t, fake, sent)
	if !r.Stream || r.IncludeUsage {
		t.Errorf("Parse read %+v; want a stream without include_usage", *r)
	}
	checkUsage(t, u, usage.PromptTokens, usage.CompletionTokens)
}

func TestSDKResponses(t *testing.T) {
	ctx := context.Background()
	_, m, url := setup(t, llm.APIOpenAI)
	client := openAIClient(m, url)
	input := responses.ResponseNewParamsInputUnion{OfString: openai.String("Write a haiku about egress.")}

	for _, max := range []int64{4, 50} { // cut short (incomplete), and not
		resp, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-5", Input: input, MaxOutputTokens: openai.Int(max)})
		if err != nil {
			t.Fatal(err)
		}
		r, _, u := m.last()
		checkRequest(t, r, llm.Request{API: "openai", Endpoint: "responses", Model: "gpt-5", MaxOutputTokens: max, HasMax: true,
			MaxField: "max_output_tokens", Choices: 1, IncludeUsage: true})
		checkUsage(t, u, resp.Usage.InputTokens, resp.Usage.OutputTokens)

		s := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "gpt-5", Input: input, MaxOutputTokens: openai.Int(max)})
		var final responses.ResponseUsage
		var terminal string
		for s.Next() {
			ev := s.Current()
			switch ev.Type {
			case "response.completed", "response.incomplete", "response.failed":
				final, terminal = ev.Response.Usage, ev.Type
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		s.Close()
		r, _, u = m.last()
		if !r.Stream || !r.IncludeUsage {
			t.Errorf("Parse read %+v; want a stream reporting usage", *r)
		}
		if terminal == "" {
			t.Fatal("the stream ended without a terminal event")
		}
		checkUsage(t, u, final.InputTokens, final.OutputTokens)
	}
}

func TestSDKEmbeddings(t *testing.T) {
	_, m, url := setup(t, llm.APIOpenAI)
	client := openAIClient(m, url)
	e, err := client.Embeddings.New(context.Background(), openai.EmbeddingNewParams{Model: "text-embedding-3-small",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"egress", "policy"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Data) != 2 || len(e.Data[0].Embedding) != 3 {
		t.Fatalf("the SDK read %d embeddings", len(e.Data))
	}
	r, _, u := m.last()
	checkRequest(t, r, llm.Request{API: "openai", Endpoint: "embeddings", Model: "text-embedding-3-small", HasMax: true, Choices: 1, IncludeUsage: true})
	checkUsage(t, u, e.Usage.PromptTokens, 0)
}

func TestSDKAnthropicMessages(t *testing.T) {
	ctx := context.Background()
	fake, m, url := setup(t, llm.APIAnthropic)
	client := anthropicClient(m, url)
	msgs := []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("What is an egress proxy?"))}
	system := []anthropic.TextBlockParam{{Text: "Answer briefly."}}

	t.Run("json", func(t *testing.T) {
		m.t = t
		msg, err := client.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 6, Messages: msgs, System: system})
		if err != nil {
			t.Fatal(err)
		}
		r, sent, u := m.last()
		checkRequest(t, r, llm.Request{API: "anthropic", Endpoint: "messages", Model: "claude-sonnet-4-5", MaxOutputTokens: 6, HasMax: true,
			MaxField: "max_tokens", Choices: 1, IncludeUsage: true})
		checkUsage(t, u, msg.Usage.InputTokens, msg.Usage.OutputTokens)
		checkReceived(t, fake, sent)
	})
	t.Run("stream", func(t *testing.T) {
		m.t = t
		s := client.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "claude-haiku-4-5", MaxTokens: 1024, Messages: msgs})
		var msg anthropic.Message
		for s.Next() {
			if err := msg.Accumulate(s.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		s.Close()
		r, _, u := m.last()
		checkRequest(t, r, llm.Request{API: "anthropic", Endpoint: "messages", Model: "claude-haiku-4-5", MaxOutputTokens: 1024, HasMax: true,
			MaxField: "max_tokens", Choices: 1, Stream: true, IncludeUsage: true})
		checkUsage(t, u, msg.Usage.InputTokens, msg.Usage.OutputTokens)
	})
	t.Run("stream clamped", func(t *testing.T) {
		m.t = t
		m.rewrite = func(*llm.Request) (int64, bool) { return 3, true }
		defer func() { m.rewrite = nil }()
		s := client.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "claude-haiku-4-5", MaxTokens: 1024, Messages: msgs})
		var msg anthropic.Message
		for s.Next() {
			if err := msg.Accumulate(s.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		s.Close()
		_, sent, u := m.last()
		checkReceived(t, fake, sent)
		checkUsage(t, u, msg.Usage.InputTokens, msg.Usage.OutputTokens)
		if u.Output != 3 || msg.StopReason != anthropic.StopReasonMaxTokens {
			t.Errorf("clamped to 3: output %d, stop %q", u.Output, msg.StopReason)
		}
	})
	t.Run("count_tokens", func(t *testing.T) {
		m.t = t
		n, err := client.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "claude-sonnet-4-5", Messages: msgs})
		if err != nil {
			t.Fatal(err)
		}
		r, _, u := m.last()
		checkRequest(t, r, llm.Request{API: "anthropic", Endpoint: "messages/count_tokens", Model: "claude-sonnet-4-5", HasMax: true, Choices: 1, IncludeUsage: true})
		if n.InputTokens == 0 || u != (llm.Usage{Found: true}) {
			t.Errorf("count_tokens counted %d; usage %+v, want found and free", n.InputTokens, u)
		}
	})
}
