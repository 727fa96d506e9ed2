package policy

import "time"

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
