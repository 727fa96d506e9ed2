// Package llm owns what egressd knows of the model APIs it meters: which
// endpoint a request calls, which model and how many output tokens it asks
// for (Parse), the body sent when the proxy sets the maximum or asks a
// stream for its usage (Rewrite), and the tokens an answer reports it used,
// in JSON (UsageJSON) or streamed as server-sent events (UsageSSE).
//
// It speaks OpenAI's chat/completions, responses, completions and
// embeddings and Anthropic's messages (and messages/count_tokens), as the
// official Go SDKs send and read them; its tests drive those SDKs against
// internal/fakemodel. It reads a body already parsed (strictly, once) into
// an OPA value, so the policy, this package and the upstream read the same
// document; it never imports policy, which imports it.
package llm

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/egressd/egressd/policy/wildcard"
)

// The APIs of a rule's "llm" key.
const (
	APIOpenAI    = "openai"
	APIAnthropic = "anthropic"
)

// The endpoints Parse knows, as Request.Endpoint and input.llm.endpoint
// spell them: the path after the API's version prefix.
const (
	EndpointChat        = "chat/completions"
	EndpointResponses   = "responses"
	EndpointCompletions = "completions"
	EndpointEmbeddings  = "embeddings"
	EndpointMessages    = "messages"
	// EndpointCountTokens is Anthropic's token counter: it names a model
	// but generates nothing and costs no tokens.
	EndpointCountTokens = "messages/count_tokens"
)

// Bounds of what Parse accepts. A value past them is malformed rather than
// clipped: a request the proxy cannot meter is refused.
const (
	// MaxTokenValue bounds a maximum of output tokens. No model generates
	// this many in one answer; the bound keeps MaxOutputTokens × Choices
	// far from overflow.
	MaxTokenValue = 1 << 30
	// MaxChoices bounds n (and best_of): OpenAI allows 128.
	MaxChoices = 1 << 10
	// MaxModelBytes bounds a model name, which is audited and metered by.
	MaxModelBytes = 256
)

// ErrMalformed is wrapped by every error of a body Parse cannot meter: no
// model, a maximum or n that is not an integer in range, a stream flag that
// is not a boolean. The proxy refuses the request (body_unparseable).
var ErrMalformed = errors.New("malformed model request")

// ErrUnknownEndpoint is wrapped by Parse's error for a path that is none of
// the API's metered endpoints, or an API it does not know. The proxy
// refuses the request: a call the rule cannot meter must not pass.
var ErrUnknownEndpoint = errors.New("unknown model endpoint")

// Request is what a model API request asks for, read from its body.
type Request struct {
	// API is APIOpenAI or APIAnthropic; Endpoint one of the Endpoint
	// constants.
	API, Endpoint string
	// Model is the body's "model": never empty.
	Model string
	// MaxOutputTokens is the request's maximum of output tokens per
	// choice: the value of MaxField, 0 when HasMax is false. Embeddings
	// and count_tokens generate nothing: 0 with HasMax true.
	MaxOutputTokens int64
	// HasMax is false when the request sets no maximum (or sets it to
	// null): the server then chooses, so the proxy refuses it or sets one.
	HasMax bool
	// MaxField is the body key MaxOutputTokens came from, "" when none
	// did. Chat completions take both max_completion_tokens and the
	// deprecated max_tokens; when both are set MaxOutputTokens is the
	// larger (servers differ in which one wins, so the larger is the one
	// that bounds the answer) and MaxField names it, ties going to
	// max_completion_tokens, the one OpenAI documents as current.
	MaxField string
	// Choices is how many answers the request asks the model to generate
	// (OpenAI's n, and best_of for completions; 1 when absent): each may
	// use MaxOutputTokens. See Reserve.
	Choices int64
	// Stream is the body's "stream": the answer is server-sent events.
	Stream bool
	// IncludeUsage is true when the answer reports the tokens used as the
	// request stands: always except a chat/completions or completions
	// stream without stream_options.include_usage, which Rewrite can ask
	// for. Embeddings and count_tokens report (or cost) nothing to ask.
	IncludeUsage bool
}

// endpoint is what Parse reads for one endpoint of an API.
type endpoint struct {
	name string
	// maxFields are the keys of its maximum of output tokens, in the
	// order of preference when both are set; none for an endpoint that
	// generates nothing.
	maxFields []string
	// choices are the keys that multiply the answers generated.
	choices []string
	// streams: the endpoint takes "stream".
	streams bool
	// usageOption: a stream reports usage only when asked through
	// stream_options.include_usage.
	usageOption bool
}

// Endpoints by API, the longer path first where one is a suffix of another.
var endpoints = map[string][]endpoint{
	APIOpenAI: {
		{name: EndpointChat, maxFields: []string{"max_completion_tokens", "max_tokens"}, choices: []string{"n"}, streams: true, usageOption: true},
		{name: EndpointResponses, maxFields: []string{"max_output_tokens"}, streams: true},
		{name: EndpointCompletions, maxFields: []string{"max_tokens"}, choices: []string{"n", "best_of"}, streams: true, usageOption: true},
		{name: EndpointEmbeddings},
	},
	APIAnthropic: {
		{name: EndpointCountTokens},
		{name: EndpointMessages, maxFields: []string{"max_tokens"}, streams: true},
	},
}

// Parse reads the model request in body v (the parsed JSON document) that
// was sent to path (the request's escaped path, without the query) of a
// host the rule says speaks api. The endpoint is the path's last segments
// ("/v1/chat/completions", "/chat/completions" and a gateway's
// "/openai/v1/chat/completions" alike); a path with percent-escapes, dot
// or empty segments, ';' or a trailing slash is no endpoint, since a server
// could route it as another. The body's keys are read exactly; one that
// equals a key read only without regard to case ("Model") is malformed,
// since Go servers read it so. v is as bounded as the proxy's parser made
// it; Parse reads only the top level and stream_options. Errors wrap
// ErrUnknownEndpoint or ErrMalformed.
func Parse(api, path string, v ast.Value) (*Request, error) {
	eps, ok := endpoints[api]
	if !ok {
		return nil, fmt.Errorf("api %q: %w", api, ErrUnknownEndpoint)
	}
	ep, err := match(eps, path)
	if err != nil {
		return nil, err
	}
	obj, ok := v.(ast.Object)
	if !ok {
		return nil, fmt.Errorf("%s body is not an object: %w", ep.name, ErrMalformed)
	}
	if err := folded(obj, ep.keys()); err != nil {
		return nil, err
	}
	r := &Request{API: api, Endpoint: ep.name, Choices: 1, IncludeUsage: true}
	if r.Model, err = model(obj); err != nil {
		return nil, err
	}
	if len(ep.maxFields) == 0 {
		r.HasMax = true
	}
	for _, f := range ep.maxFields {
		n, ok, err := integer(obj, f, 1, MaxTokenValue)
		if err != nil {
			return nil, err
		}
		if ok && (!r.HasMax || n > r.MaxOutputTokens) {
			r.MaxOutputTokens, r.HasMax, r.MaxField = n, true, f
		}
	}
	for _, f := range ep.choices {
		n, ok, err := integer(obj, f, 1, MaxChoices)
		if err != nil {
			return nil, err
		}
		if ok && n > r.Choices {
			r.Choices = n
		}
	}
	if ep.streams {
		if r.Stream, _, err = boolean(obj, "stream"); err != nil {
			return nil, err
		}
	}
	if ep.usageOption {
		include, err := includeUsage(obj)
		if err != nil {
			return nil, err
		}
		r.IncludeUsage = !r.Stream || include
	}
	return r, nil
}

// keys are the body keys Parse reads for the endpoint.
func (ep *endpoint) keys() []string {
	keys := append([]string{"model"}, ep.maxFields...)
	keys = append(keys, ep.choices...)
	if ep.streams {
		keys = append(keys, "stream")
	}
	if ep.usageOption {
		keys = append(keys, "stream_options")
	}
	return keys
}

// folded refuses a key that is not one of keys but equals one without
// regard to case ("Model", "max_toKens" with a Kelvin sign): a server
// decoding with Go's encoding/json, which matches struct fields so, would
// read it where Parse read another value, or none.
func folded(obj ast.Object, keys []string) error {
	return obj.Iter(func(k, _ *ast.Term) error {
		s, ok := k.Value.(ast.String)
		if !ok {
			return nil
		}
		for _, key := range keys {
			if string(s) != key && strings.EqualFold(string(s), key) {
				return fmt.Errorf("key %.40q reads as %q to some servers: %w", string(s), key, ErrMalformed)
			}
		}
		return nil
	})
}

// match finds the endpoint path names.
func match(eps []endpoint, path string) (*endpoint, error) {
	if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, "%;\\") ||
		strings.Contains(path, "//") || strings.HasSuffix(path, "/") ||
		strings.Contains(path+"/", "/./") || strings.Contains(path+"/", "/../") {
		return nil, fmt.Errorf("path %q: %w", path, ErrUnknownEndpoint)
	}
	for i := range eps {
		ep := &eps[i]
		if !strings.HasSuffix(path, "/"+ep.name) {
			continue
		}
		// A server that routes without regard to case would take
		// ".../Chat/completions" for chat completions, whose maximum is
		// another key: refuse the path rather than read the wrong one.
		if ep.name == EndpointCompletions && strings.HasSuffix(strings.ToLower(path), "/"+EndpointChat) {
			break
		}
		return ep, nil
	}
	return nil, fmt.Errorf("path %q: %w", path, ErrUnknownEndpoint)
}

// model reads the body's model.
func model(obj ast.Object) (string, error) {
	t := obj.Get(ast.InternedTerm("model"))
	if t == nil {
		return "", fmt.Errorf("no model: %w", ErrMalformed)
	}
	s, ok := t.Value.(ast.String)
	switch {
	case !ok:
		return "", fmt.Errorf("model is %s, not a string: %w", ast.ValueName(t.Value), ErrMalformed)
	case s == "":
		return "", fmt.Errorf("model is empty: %w", ErrMalformed)
	case len(s) > MaxModelBytes:
		return "", fmt.Errorf("model is %d bytes, over %d: %w", len(s), MaxModelBytes, ErrMalformed)
	}
	return string(s), nil
}

// integer reads key as an integer in [lo, hi]; absent and null are not
// set. Only an integer literal is one: "100.0" or "1e2" would be read as
// 100 by some servers and refused by others, so they are malformed here.
func integer(obj ast.Object, key string, lo, hi int64) (int64, bool, error) {
	t := obj.Get(ast.InternedTerm(key))
	if t == nil {
		return 0, false, nil
	}
	if _, null := t.Value.(ast.Null); null {
		return 0, false, nil
	}
	num, ok := t.Value.(ast.Number)
	if !ok {
		return 0, false, fmt.Errorf("%s is %s, not an integer: %w", key, ast.ValueName(t.Value), ErrMalformed)
	}
	n, err := strconv.ParseInt(string(num), 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, false, fmt.Errorf("%s is %.40s, not an integer in [%d, %d]: %w", key, string(num), lo, hi, ErrMalformed)
	}
	return n, true, nil
}

// boolean reads key as a boolean; absent and null are false and not set.
func boolean(obj ast.Object, key string) (bool, bool, error) {
	t := obj.Get(ast.InternedTerm(key))
	if t == nil {
		return false, false, nil
	}
	switch b := t.Value.(type) {
	case ast.Null:
		return false, false, nil
	case ast.Boolean:
		return bool(b), true, nil
	}
	return false, false, fmt.Errorf("%s is %s, not a boolean: %w", key, ast.ValueName(t.Value), ErrMalformed)
}

// includeUsage reads stream_options.include_usage.
func includeUsage(obj ast.Object) (bool, error) {
	t := obj.Get(ast.InternedTerm("stream_options"))
	if t == nil {
		return false, nil
	}
	switch o := t.Value.(type) {
	case ast.Null:
		return false, nil
	case ast.Object:
		if err := folded(o, []string{"include_usage"}); err != nil {
			return false, fmt.Errorf("stream_options: %w", err)
		}
		b, _, err := boolean(o, "include_usage")
		if err != nil {
			return false, fmt.Errorf("stream_options: %w", err)
		}
		return b, nil
	}
	return false, fmt.Errorf("stream_options is %s, not an object: %w", ast.ValueName(t.Value), ErrMalformed)
}

// Reserve is the most output tokens the request can use: MaxOutputTokens
// for each of its Choices. It is what a budget reserves, and what a cap on
// output tokens is compared with; a cap is set by Rewrite with
// setMax = cap / Choices.
func (r *Request) Reserve() int64 {
	return r.MaxOutputTokens * r.Choices
}

// Term is input.llm of the request's decision: {"api", "endpoint",
// "model", "max_output_tokens", "choices", "stream"}. max_output_tokens is
// absent when the request sets no maximum, so that a rule comparing it is
// undefined (and allows nothing) rather than comparing null, which Rego
// orders below every number.
func (r *Request) Term() *ast.Term {
	kv := [][2]*ast.Term{
		{ast.InternedTerm("api"), ast.StringTerm(r.API)},
		{ast.InternedTerm("endpoint"), ast.StringTerm(r.Endpoint)},
		{ast.InternedTerm("model"), ast.StringTerm(r.Model)},
		{ast.InternedTerm("choices"), ast.IntNumberTerm(int(r.Choices))},
		{ast.InternedTerm("stream"), ast.BooleanTerm(r.Stream)},
	}
	if r.HasMax {
		kv = append(kv, [2]*ast.Term{ast.InternedTerm("max_output_tokens"), ast.IntNumberTerm(int(r.MaxOutputTokens))})
	}
	return ast.ObjectTerm(kv...)
}

// ModelMatches reports whether model matches one of globs, where "*"
// matches any run of characters (none included) and every other byte
// itself (package wildcard, which tool globs share).
func ModelMatches(globs []string, model string) bool { return wildcard.Any(globs, model) }
