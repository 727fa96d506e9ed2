package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/decisiontest"
	"github.com/egressd/egressd/internal/fakemodel"
)

// modelWorld is a fake model server behind an inspected egressd, with
// the official OpenAI and Anthropic Go SDKs as the agent.
type modelWorld struct {
	fake      *fakemodel.Server
	base      string
	e         *Egressd
	openai    openai.Client
	anthropic anthropic.Client
}

func startModelWorld(t *testing.T, auditDir string, fake *fakemodel.Server, up *Upstream) *modelWorld {
	t.Helper()
	in := newInspecting(t, up)
	pol := WritePolicy(t, []Rule{
		{ID: "openai", Hosts: []string{"example.com"}, Ports: []int{up.Port}, Inspect: true, Paths: []string{"/v1/chat/**", "/v1/responses", "/v1/models"},
			LLM: map[string]any{"api": "openai", "models": []string{"gpt-4o*"}, "max_output_tokens": 100}},
		{ID: "claude", Hosts: []string{"example.com"}, Ports: []int{up.Port}, Inspect: true, Paths: []string{"/v1/messages"},
			LLM: map[string]any{"api": "anthropic", "models": []string{"claude-*"}, "max_output_tokens": 10, "excess": "clamp",
				"budget": map[string]any{"tokens": 60, "per": "24h"}}},
	})
	roots := exportedRoots(t, in.CADir, "--identity", "anonymous")
	e := Start(t, Options{YAML: in.YAML, PolicyDir: pol, DNS: in.DNS.Addr(), AuditDir: auditDir})
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(e.ProxyURL("", "")), TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}}
	base := "https://example.com:" + strconv.Itoa(up.Port)
	return &modelWorld{fake: fake, base: base, e: e,
		openai: openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("sk-test"),
			option.WithHTTPClient(hc), option.WithMaxRetries(0)),
		anthropic: anthropic.NewClient(anthropicoption.WithBaseURL(base), anthropicoption.WithAPIKey("sk-ant-test"),
			anthropicoption.WithHTTPClient(hc), anthropicoption.WithMaxRetries(0)),
	}
}

// claude sends one Anthropic message asking for 1000 tokens (the rule
// clamps it to 10); it returns the answer's usage or the API error.
func (w *modelWorld) claude(ctx context.Context) (*anthropic.Message, error) {
	return w.anthropic.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-haiku-4-5", MaxTokens: 1000,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("count me"))}})
}

// TestModelPlane: through the binary, with the official SDKs against a
// local model server: a model not listed is refused before anything is
// sent; a stream that did not ask for usage is asked, and its usage is
// recorded; a request over the cap is clamped; the identity's token budget
// refuses with 429 and Retry-After once spent, and still does after a
// restart, rebuilt from the audit log.
func TestModelPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fake := fakemodel.New()
	up := StartTLSHandler(t, fake, true)
	w := startModelWorld(t, "", fake, up)

	_, err := w.openai.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "o3",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, MaxCompletionTokens: openai.Int(5)})
	var oerr *openai.Error
	if !errors.As(err, &oerr) || oerr.StatusCode != http.StatusForbidden || decisiontest.Reason(oerr.Response.Header) != "model_denied" {
		t.Errorf("unlisted model: %v; want 403 model_denied", err)
	}
	if n := len(fake.Requests()); n != 0 {
		t.Fatalf("the refused request reached the model server (%d requests)", n)
	}

	s := w.openai.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("stream me")}, MaxCompletionTokens: openai.Int(50)})
	var acc openai.ChatCompletionAccumulator
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream through egressd: %v", err)
	}
	var sent struct {
		StreamOptions map[string]bool `json:"stream_options"`
	}
	if reqs := fake.Requests(); len(reqs) != 1 || json.Unmarshal(reqs[0].Body, &sent) != nil || !sent.StreamOptions["include_usage"] {
		t.Errorf("the stream was not asked for its usage: %+v", sent)
	}
	recs := w.e.WaitRecords(t, "of the stream's completion with its usage", func(r audit.Record) bool {
		return r.Kind == audit.KindHTTPDone && r.Model == "gpt-4o-mini" && r.TokensOut > 0
	})
	if r := recs[0]; r.TokensOut != acc.Usage.CompletionTokens || r.TokensIn != acc.Usage.PromptTokens {
		t.Errorf("recorded usage in %d out %d; the SDK read in %d out %d", r.TokensIn, r.TokensOut, acc.Usage.PromptTokens, acc.Usage.CompletionTokens)
	}

	if n := metricValue(t, w.e.Metrics(t), `egressd_model_tokens_total{direction="output",identity="anonymous",model="gpt-4o-mini"}`); n != float64(acc.Usage.CompletionTokens) {
		t.Errorf("egressd_model_tokens_total output = %v; want the stream's %d", n, acc.Usage.CompletionTokens)
	}
	// Each message costs its input tokens plus 7 generated; the budget of
	// 60 pays for a few, then refuses.
	var spent, sentOK int
	var refused *anthropic.Error
	for i := 0; i < 20 && refused == nil; i++ {
		msg, err := w.claude(ctx)
		if errors.As(err, &refused) {
			break
		}
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		sentOK++
		spent += int(msg.Usage.InputTokens + msg.Usage.OutputTokens)
	}
	if refused == nil || refused.StatusCode != http.StatusTooManyRequests || decisiontest.Reason(refused.Response.Header) != "token_budget_exceeded" {
		t.Fatalf("after %d messages (%d tokens): %v; want 429 token_budget_exceeded", sentOK, spent, refused)
	}
	if ra, err := strconv.Atoi(refused.Response.Header.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("Retry-After %q; want whole seconds", refused.Response.Header.Get("Retry-After"))
	}
	if spent > 60 || sentOK == 0 {
		t.Errorf("%d messages spent %d tokens of a budget of 60", sentOK, spent)
	}
	var clamped struct {
		MaxTokens int `json:"max_tokens"`
	}
	reqs := fake.Requests()
	if json.Unmarshal(reqs[len(reqs)-1].Body, &clamped) != nil || clamped.MaxTokens != 10 {
		t.Errorf("the model server was asked for %d tokens; want the rule's cap, 10", clamped.MaxTokens)
	}
	before := len(reqs)
	if err := w.e.Stop(10 * time.Second); err != nil {
		t.Logf("stop: %v", err)
	}
	w2 := startModelWorld(t, w.e.AuditDir, fake, up)
	if _, err := w2.claude(ctx); !errors.As(err, &refused) || refused.StatusCode != http.StatusTooManyRequests {
		t.Errorf("after a restart: %v; want the budget still spent (429)", err)
	}
	if len(fake.Requests()) != before {
		t.Errorf("a refused request reached the model server")
	}
	if err := w2.e.Stop(10 * time.Second); err != nil {
		t.Logf("stop: %v", err)
	}
	VerifyAudit(t, w2.e)
}

// TestMaxRequestBytesThroughBinary: a rule's max_request_bytes refuses a
// declared length over it with nothing sent, and stops a chunked body that
// crosses it mid-stream: the upstream's own log holds no whole request of
// either (fakemodel records whether each body it got was complete).
func TestMaxRequestBytesThroughBinary(t *testing.T) {
	fake := fakemodel.New()
	up := StartTLSHandler(t, fake, false)
	in := newInspecting(t, up)
	pol := WritePolicy(t, []Rule{{ID: "uploads", Hosts: []string{"example.com"}, Ports: []int{up.Port}, Inspect: true,
		Methods: []string{"POST"}, Paths: []string{"/v1/**"}, MaxRequestBytes: 4096}})
	roots := exportedRoots(t, in.CADir, "--identity", "anonymous")
	e := Start(t, Options{YAML: in.YAML, PolicyDir: pol, DNS: in.DNS.Addr()})
	url := "https://example.com:" + strconv.Itoa(up.Port) + "/v1/embeddings"
	send := func(body io.Reader, n int64) (int, string) {
		// A client of its own: a refusal closes the connection.
		hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			Proxy: http.ProxyURL(e.ProxyURL("", "")), TLSClientConfig: &tls.Config{RootCAs: roots}}}
		req, _ := http.NewRequest(http.MethodPost, url, body)
		req.ContentLength = n
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, decisiontest.Reason(resp.Header)
	}
	big := `{"model":"m","input":"` + strings.Repeat("x", 64<<10) + `"}`
	if code, reason := send(strings.NewReader(big), int64(len(big))); code != http.StatusRequestEntityTooLarge || reason != "body_too_large" {
		t.Errorf("declared length over the limit: %d %s; want 413 body_too_large", code, reason)
	}
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("a request refused by its Content-Length reached the upstream (%d)", n)
	}
	send(struct{ io.Reader }{strings.NewReader(big)}, -1)
	recs := e.WaitRecords(t, "of the body stopped mid-stream", func(r audit.Record) bool {
		return r.Kind == audit.KindHTTPDone && r.Reason == "body_too_large"
	})
	if recs[0].BytesOut > 4096 {
		t.Errorf("%d body bytes went upstream; the limit is 4096", recs[0].BytesOut)
	}
	for _, r := range fake.Requests() {
		if r.Complete || len(r.Body) > 4096 {
			t.Errorf("the upstream received a complete request or more than the limit: complete %v, %d bytes", r.Complete, len(r.Body))
		}
	}
	if err := e.Stop(10 * time.Second); err != nil {
		t.Logf("stop: %v", err)
	}
	VerifyAudit(t, e)
}
