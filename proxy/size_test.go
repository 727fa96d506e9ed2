package proxy

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/egressd/egressd/audit"
	"github.com/egressd/egressd/internal/decisiontest"
	"github.com/egressd/egressd/internal/fakemodel"
	"github.com/egressd/egressd/internal/identity"
	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/proxy/budget"
)

// bodyLog is an upstream handler that reads every body to its end and
// logs how each ended: whole, or cut (the read failed: a chunked body
// without its last chunk, a reset h2 stream).
type bodyLog struct {
	mu   sync.Mutex
	got  []string // "whole:N" or "cut:N"
	seen int
}

func (l *bodyLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	l.mu.Lock()
	l.seen = max(l.seen, len(b))
	if err != nil {
		l.got = append(l.got, "cut")
	} else {
		l.got = append(l.got, "whole")
	}
	l.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (l *bodyLog) snapshot() ([]string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.got...), l.seen
}

// onlyReader hides bytes.Reader's length, so a client sends the body
// chunked (h1) or without a content-length (h2).
type onlyReader struct{ io.Reader }

// TestMaxRequestBytes: a rule's max_request_bytes refuses a declared
// Content-Length over it before any byte goes upstream, and stops a
// chunked or h2 body that crosses it mid-stream so that the upstream never
// holds a whole request, nor a byte past the limit; both are recorded
// body_too_large with the rule.
func TestMaxRequestBytes(t *testing.T) {
	const limit = 1000
	log := &bodyLog{}
	f := startInspect(t, log, inspectOptions{rules: `{"rules": [
		{"id": "small", "hosts": ["example.com"], "ports": [PORT], "methods": ["POST"], "paths": ["/ok/**"], "inspect": true, "max_request_bytes": 1000}
	]}`})
	for _, h2 := range []bool{false, true} {
		post := func(body io.Reader, n int64) int {
			t.Helper()
			// A client of its own: a refusal may close the connection,
			// and a body that cannot be rewound is not retried on another.
			c := f.client(t, h2)
			req, err := http.NewRequest(http.MethodPost, f.url("/ok/x"), body)
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = n
			resp, err := c.Do(req)
			if err != nil {
				// The proxy may answer before the client sent it all.
				return 0
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode
		}
		if got := post(strings.NewReader(strings.Repeat("a", limit)), limit); got != http.StatusOK {
			t.Fatalf("h2=%v: a body of exactly max_request_bytes = %d, want 200", h2, got)
		}
		if got := post(strings.NewReader(strings.Repeat("a", limit+1)), limit+1); got != http.StatusRequestEntityTooLarge {
			t.Errorf("h2=%v: Content-Length over the limit = %d, want 413", h2, got)
		}
		if got := post(onlyReader{bytes.NewReader(bytes.Repeat([]byte("b"), 64<<10))}, -1); got != http.StatusRequestEntityTooLarge && got != 0 {
			t.Errorf("h2=%v: streamed body over the limit = %d, want 413", h2, got)
		}
	}
	got, seen := log.snapshot()
	wholes := 0
	for _, g := range got {
		if g == "whole" {
			wholes++
		}
	}
	if wholes != 2 {
		t.Errorf("upstream log %v: want exactly the two bodies within the limit whole", got)
	}
	if seen > limit {
		t.Errorf("upstream read %d body bytes of one request, over the limit %d", seen, limit)
	}
	var refused int
	count := func(recs []audit.Record) int {
		n := 0
		for _, r := range recs {
			if r.Reason == string(policy.ReasonBodyTooLarge) {
				n++
			}
		}
		return n
	}
	recs := f.audit.Wait(t, func(recs []audit.Record) bool { return count(recs) >= 4 })
	for _, r := range recs {
		if r.Reason == string(policy.ReasonBodyTooLarge) {
			refused++
			if r.Decision != audit.DecisionDeny || (r.Kind != audit.KindHTTPDone && r.Rule != "small") {
				t.Errorf("record %+v: want a deny (of rule small when it is the decision)", r)
			}
		}
	}
	if refused != 4 {
		t.Errorf("%d body_too_large records, want 4 (two declared, two streamed)", refused)
	}
}

// TestByteBudget: an identity with a byte budget is refused 429
// byte_budget_exceeded, with Retry-After, once its requests have moved
// the budget's bytes; another identity is not.
func TestByteBudget(t *testing.T) {
	ids := identity.Config{
		{ID: "sbx-a", TokenSHA256: hashHex("tok-a"), ByteBudget: &identity.ByteBudget{Bytes: 3000, Per: "1h"}},
		{ID: "sbx-b", TokenSHA256: hashHex("tok-b")},
	}
	f := startInspect(t, &bodyLog{}, inspectOptions{ids: ids, budgets: budget.NewLedger(nil), rules: `{"rules": [
		{"id": "up", "hosts": ["example.com"], "ports": [PORT], "methods": ["POST"], "paths": ["/ok/**"], "inspect": true}
	]}`})
	clients := map[string]*http.Client{}
	for _, id := range []string{"sbx-a", "sbx-b"} {
		// One keep-alive tunnel each: the refusal comes inside it, not
		// at a new CONNECT (which is refused the same way).
		clients[id] = f.clientAs(t, false, id, url.UserPassword(id, "tok-"+id[len(id)-1:]))
	}
	post := func(id string) *http.Response {
		t.Helper()
		resp, err := clients[id].Post(f.url("/ok/x"), "text/plain", strings.NewReader(strings.Repeat("z", 1000)))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	var refused *http.Response
	for i := 0; i < 10 && refused == nil; i++ {
		if resp := post("sbx-a"); resp.StatusCode != http.StatusOK {
			refused = resp
		}
	}
	if refused == nil || refused.StatusCode != http.StatusTooManyRequests || decisiontest.Reason(refused.Header) != "byte_budget_exceeded" {
		t.Fatalf("sbx-a after its budget: %v; want 429 byte_budget_exceeded", refused)
	}
	if ra := refused.Header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Errorf("Retry-After %q; want seconds", ra)
	}
	if resp := post("sbx-b"); resp.StatusCode != http.StatusOK {
		t.Errorf("sbx-b, without a budget: %d", resp.StatusCode)
	}
}

// TestTokenReservationReleasedOnRefusal: a model request refused after it
// reserved its tokens (here: it carries a loaded secret) gives the
// reservation back, so the identity's next request still fits the budget.
func TestTokenReservationReleasedOnRefusal(t *testing.T) {
	f := startInspect(t, fakemodel.New(), inspectOptions{secrets: testStore(t), budgets: budget.NewLedger(nil), rules: `{"rules": [
		{"id": "model", "hosts": ["example.com"], "ports": [PORT], "inspect": true,
		 "llm": {"api": "anthropic", "models": ["claude-*"], "max_output_tokens": 100, "budget": {"tokens": 200, "per": "1h"}}}
	]}`})
	c := f.client(t, false)
	send := func(key string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, f.url("/v1/messages"), strings.NewReader(`{"model":"claude-x","max_tokens":100,"messages":[]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Key", key)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if resp := send(testSecret); resp.StatusCode != http.StatusForbidden || decisiontest.Reason(resp.Header) != "secret_in_request" {
		t.Fatalf("request with a loaded secret: %d %s; want 403 secret_in_request", resp.StatusCode, decisiontest.Reason(resp.Header))
	}
	if resp := send("own"); resp.StatusCode != http.StatusOK {
		t.Errorf("next request: %d %s; want 200: the refused request's reservation was kept", resp.StatusCode, decisiontest.Reason(resp.Header))
	}
}
