package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// RuleOptions are what an allowing rule says about the requests it allows
// beyond their request line: how large they may be, and the body
// conditions (its "mcp" and "llm" keys) that make egressd read the body
// before deciding. Looked up Go-side by rule id like Credentials, and
// shared by every decision of the rule: read only.
type RuleOptions struct {
	// MaxBodyBytes bounds a body read to decide on it ("max_body_bytes",
	// DefaultMaxBodyBytes when absent).
	MaxBodyBytes int64 `json:"max_body_bytes,omitempty"`
	// MaxRequestBytes bounds every body the rule allows, read or
	// streamed ("max_request_bytes"); 0 is no bound.
	MaxRequestBytes int64 `json:"max_request_bytes,omitempty"`
	// MCP is the rule's "mcp" key: the requests are MCP JSON-RPC.
	MCP *MCPRule `json:"mcp,omitempty"`
	// LLM is the rule's "llm" key: the requests are model API calls.
	LLM *LLMRule `json:"llm,omitempty"`
	// SecretPatterns is "refuse" when a secret pattern (a cloud key, a
	// token) found in a request the rule allows refuses it; otherwise
	// ("record", the default) the finding is only recorded.
	SecretPatterns string `json:"secret_patterns,omitempty"`

	// ports are the rule's, for needBody.
	ports []int
}

// A rule's "secret_patterns" and an identity's attribute of that name
// refuse a request with a secret pattern when they say "refuse".
const (
	SecretPatternsAttribute = "secret_patterns"
	SecretPatternsRefuse    = "refuse"
)

// DefaultMaxBodyBytes is the bound of a body read to decide on it when
// the rule sets none.
const DefaultMaxBodyBytes = 1 << 20

// MCPRule is a rule's "mcp" key: the MCP server's tools an agent may
// call.
type MCPRule struct {
	// Tools are globs on tool names ("search_*", "ticket.create"): "*"
	// matches any run of characters.
	Tools []string `json:"tools"`
}

// LLMRule is a rule's "llm" key: which model API the hosts speak and what
// an identity may ask of it.
type LLMRule struct {
	// API is "openai" (chat/completions, responses, completions,
	// embeddings) or "anthropic" (messages).
	API string `json:"api"`
	// Models are globs on model names; a model not matched is refused.
	Models []string `json:"models"`
	// MaxOutputTokens caps what one request may ask for; 0 is no cap.
	MaxOutputTokens int64 `json:"max_output_tokens,omitempty"`
	// Excess is what a request over MaxOutputTokens (or with no maximum
	// while the rule has a cap or a budget) gets: "refuse" (default) or
	// "clamp" (its maximum is set to the cap).
	Excess string `json:"excess,omitempty"`
	// Budget is the identity's token allowance per window, counted per
	// rule and replica.
	Budget *TokenBudget `json:"budget,omitempty"`
}

// TokenBudget is a token allowance per window ("per": a Go duration).
type TokenBudget struct {
	Tokens int64         `json:"tokens"`
	Per    time.Duration `json:"-"`
}

// llmRuleSpec is the "llm" key as written: "per" is a duration string.
type llmRuleSpec struct {
	LLMRule
	Budget *struct {
		Tokens int64  `json:"tokens"`
		Per    string `json:"per"`
	} `json:"budget,omitempty"`
}

// APIs are the model APIs an "llm" key may name.
var llmAPIs = []string{"openai", "anthropic"}

// Bounds of the request keys: a body read to decide on it is held in
// memory, so its bound is capped; a window longer than a month would be
// rebuilt from more audit log than a start should read.
const (
	maxBodyBytesCap = 64 << 20
	maxBudgetWindow = 31 * 24 * time.Hour
)

// decidesBody says the rule's allow depends on its requests' bodies.
func (r *ruleSpec) decidesBody() bool { return len(r.MCPKey) > 0 || len(r.LLMKey) > 0 }

// validateRequestKeys checks the request keys of one rule.
func (r *ruleSpec) validateRequestKeys() error {
	if r.MaxBodyBytes != nil && (*r.MaxBodyBytes < 1 || *r.MaxBodyBytes > maxBodyBytesCap) {
		return fmt.Errorf("max_body_bytes must be 1-%d, got %d (rule %q)", maxBodyBytesCap, *r.MaxBodyBytes, r.ID)
	}
	if r.MaxRequestBytes < 0 {
		return fmt.Errorf("max_request_bytes must be positive, got %d (rule %q)", r.MaxRequestBytes, r.ID)
	}
	switch r.SecretPatterns {
	case "", "record", "refuse":
	default:
		return fmt.Errorf("secret_patterns must be \"record\" or \"refuse\", got %q (rule %q)", r.SecretPatterns, r.ID)
	}
	if err := decodeKey(r.MCPKey, "mcp", &r.mcp); err != nil {
		return fmt.Errorf("%w (rule %q)", err, r.ID)
	}
	if err := decodeKey(r.LLMKey, "llm", &r.llm); err != nil {
		return fmt.Errorf("%w (rule %q)", err, r.ID)
	}
	if !r.decidesBody() {
		if r.MaxBodyBytes != nil {
			return fmt.Errorf("max_body_bytes bounds a body read to decide on it, but the rule has no mcp or llm key: use max_request_bytes to bound what it streams (rule %q)", r.ID)
		}
		return nil
	}
	if r.mcp != nil && r.llm != nil {
		return fmt.Errorf("mcp and llm must not both be set: a server speaks one of them; write two rules (rule %q)", r.ID)
	}
	if r.Action == "deny" {
		return fmt.Errorf("mcp and llm must not be set on a deny rule, which refuses every request anyway (rule %q)", r.ID)
	}
	if !r.Inspect && slices.Contains(r.Ports, 443) {
		// Without termination the body of an HTTPS request is never seen.
		return fmt.Errorf("mcp and llm on port 443 need \"inspect\": true, or no request body is ever seen to decide on (rule %q)", r.ID)
	}
	if r.mcp != nil {
		if len(r.mcp.Tools) == 0 {
			return fmt.Errorf("mcp.tools must list the tools an agent may call (globs, \"*\" any run); [\"*\"] allows every tool (rule %q)", r.ID)
		}
		for j, t := range r.mcp.Tools {
			if t == "" || len(t) > maxGlobLen {
				return fmt.Errorf("mcp.tools[%d] must be 1-%d characters, got %d (rule %q)", j, maxGlobLen, len(t), r.ID)
			}
		}
	}
	if l := r.llm; l != nil {
		if !slices.Contains(llmAPIs, l.API) {
			return fmt.Errorf("llm.api must be one of %q, got %q (rule %q)", llmAPIs, l.API, r.ID)
		}
		if len(l.Models) == 0 {
			return fmt.Errorf("llm.models must list the models an agent may call (globs, \"*\" any run) (rule %q)", r.ID)
		}
		for j, m := range l.Models {
			if m == "" || len(m) > maxGlobLen {
				return fmt.Errorf("llm.models[%d] must be 1-%d characters, got %d (rule %q)", j, maxGlobLen, len(m), r.ID)
			}
		}
		if l.MaxOutputTokens < 0 {
			return fmt.Errorf("llm.max_output_tokens must be positive, got %d (rule %q)", l.MaxOutputTokens, r.ID)
		}
		switch l.Excess {
		case "", "refuse":
		case "clamp":
			if l.MaxOutputTokens == 0 {
				return fmt.Errorf("llm.excess \"clamp\" sets a request's maximum to max_output_tokens, which is not set (rule %q)", r.ID)
			}
		default:
			return fmt.Errorf("llm.excess must be \"refuse\" or \"clamp\", got %q (rule %q)", l.Excess, r.ID)
		}
		if b := l.Budget; b != nil {
			per, err := time.ParseDuration(b.Per)
			if err != nil || per < time.Minute || per > maxBudgetWindow {
				return fmt.Errorf("llm.budget.per must be a duration from 1m to %s (\"24h\"), got %q (rule %q)", maxBudgetWindow, b.Per, r.ID)
			}
			if b.Tokens < 1 {
				return fmt.Errorf("llm.budget.tokens must be positive, got %d (rule %q)", b.Tokens, r.ID)
			}
		}
	}
	return nil
}

// maxGlobLen bounds a tool or model glob.
const maxGlobLen = 256

// options are the rule's RuleOptions; nil when it sets no request key.
func (r *ruleSpec) options() *RuleOptions {
	if r.MaxBodyBytes == nil && r.MaxRequestBytes == 0 && r.mcp == nil && r.llm == nil && r.SecretPatterns == "" {
		return nil
	}
	o := &RuleOptions{MaxRequestBytes: r.MaxRequestBytes, MCP: r.mcp, SecretPatterns: r.SecretPatterns, ports: r.Ports}
	if r.decidesBody() {
		o.MaxBodyBytes = DefaultMaxBodyBytes
		if r.MaxBodyBytes != nil {
			o.MaxBodyBytes = *r.MaxBodyBytes
		}
	}
	if r.llm != nil {
		l := r.llm.LLMRule
		if b := r.llm.Budget; b != nil {
			per, _ := time.ParseDuration(b.Per)
			l.Budget = &TokenBudget{Tokens: b.Tokens, Per: per}
		}
		o.LLM = &l
	}
	return o
}

// setOptions records each view's and each rule's RuleOptions (views in
// order, as buildIndex sorted them).
func (x *viewIndex) setOptions(rules []ruleSpec, order []int) {
	x.opts = make([]*RuleOptions, len(order))
	x.byRule = map[string]*RuleOptions{}
	for v, i := range order {
		if o := rules[i].options(); o != nil {
			x.opts[v] = o
			x.byRule[rules[i].ID] = o
		}
	}
	x.setBodyDenials()
}

// decodeKey decodes the rule key name (raw, when set) into *dst, refusing
// keys dst does not have: a misspelt key would otherwise decide nothing.
func decodeKey[T any](raw json.RawMessage, name string, dst **T) error {
	if len(raw) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	v := new(T)
	if err := dec.Decode(v); err != nil {
		if key, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return fmt.Errorf("%s has unknown key %s", name, key)
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	*dst = v
	return nil
}

// RuleOptions are the request keys of the active bundle's rule id, nil
// when it has none.
func (e *Engine) RuleOptions(id string) *RuleOptions { return e.cur.views.byRule[id] }

// RuleIdentities are the "identities" of each rule that lists any, by
// rule id (a grant's rule among them), for checking them against the
// config's identities, which the bundle does not know. The caller must
// not modify them.
func (e *Engine) RuleIdentities() map[string][]string { return e.cur.views.identities }
