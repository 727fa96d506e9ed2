package llm

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// Usage is what an answer reports it used.
type Usage struct {
	// Input is the prompt's tokens: OpenAI's prompt_tokens or
	// input_tokens (cached ones included), Anthropic's input_tokens plus
	// its cache_creation_input_tokens and cache_read_input_tokens, which
	// Anthropic counts apart.
	Input int64
	// Output is the tokens generated, reasoning included: OpenAI's
	// completion_tokens or output_tokens, Anthropic's output_tokens.
	Output int64
	// Found is true when the answer carried its final usage. When false,
	// Input and Output are what was seen before the answer ended (an
	// Anthropic stream's input, from message_start, say), and the proxy
	// settles at the request's reservation.
	Found bool
}

// Bounds of what the usage readers parse.
const (
	// MaxUsageBody bounds a JSON answer UsageJSON parses: a larger one
	// is not read (Found false).
	MaxUsageBody = 8 << 20
	// MaxEventBytes bounds one server-sent event UsageSSE parses, lines
	// and data alike: a larger event is passed on but not read. A
	// responses stream's response.completed repeats the whole answer, so
	// the bound is generous.
	MaxEventBytes = 4 << 20
	// maxTokenCount bounds one count an answer reports; a larger one is
	// not believed (Found false).
	maxTokenCount = 1 << 40
)

// UsageJSON reads the usage of a non-streamed answer of api's endpoint.
// An answer over MaxUsageBody, not JSON, or without usage is Found false.
// count_tokens costs nothing: its answer is Found with no tokens.
func UsageJSON(api, endpoint string, body []byte) Usage {
	if api == APIAnthropic && endpoint == EndpointCountTokens {
		return Usage{Found: true}
	}
	if len(body) > MaxUsageBody || !isObject(body) {
		return Usage{}
	}
	usage, _ := member(body, "usage")
	if api == APIAnthropic {
		if endpoint != EndpointMessages {
			return Usage{}
		}
		var a anthropicUsage
		a.message(usage)
		return a.usage(a.sawOutput)
	}
	u, _ := openAIUsage(endpoint, usage)
	return u
}

// object decodes a usage object's members, keys matched exactly (unlike
// encoding/json's struct fields, which fold case). Not an object, or
// null, is false.
func object(raw []byte) (map[string]json.RawMessage, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil, false
	}
	return m, true
}

// count reads member key of m as a token count: an integer literal in
// [0, maxTokenCount]. present is false for an absent or null member; ok
// is false for one that is no such count.
func count(m map[string]json.RawMessage, key string) (n int64, present, ok bool) {
	raw, has := m[key]
	if !has || string(raw) == "null" {
		return 0, false, true
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n < 0 || n > maxTokenCount {
		return 0, true, false
	}
	return n, true, true
}

// openAIUsage reads an OpenAI usage object of endpoint's answers. found
// is false for null, absent or malformed usage.
func openAIUsage(endpoint string, raw json.RawMessage) (Usage, bool) {
	m, ok := object(raw)
	if !ok {
		return Usage{}, false
	}
	inKey, outKey := "prompt_tokens", "completion_tokens"
	switch endpoint {
	case EndpointResponses:
		inKey, outKey = "input_tokens", "output_tokens"
	case EndpointEmbeddings:
		outKey = ""
	case EndpointChat, EndpointCompletions:
	default:
		return Usage{}, false
	}
	in, inSet, inOK := count(m, inKey)
	if !inSet || !inOK {
		return Usage{}, false
	}
	u := Usage{Input: in, Found: true}
	if outKey != "" {
		out, outSet, outOK := count(m, outKey)
		if !outSet || !outOK {
			return Usage{}, false
		}
		u.Output = out
	}
	return u, true
}

// anthropicUsage accumulates an Anthropic message's usage as the SDK's
// Message.Accumulate does: message_start gives every count, message_delta
// overwrites output_tokens and each input count it carries (all are
// totals, not increments).
type anthropicUsage struct {
	input, cacheCreation, cacheRead, output int64
	// sawOutput: a valid output_tokens was read.
	sawOutput bool
	// bad: a count was malformed; nothing read is believed.
	bad bool
}

// message reads a Message's usage (a JSON answer's, or message_start's
// message.usage).
func (a *anthropicUsage) message(raw json.RawMessage) {
	m, ok := object(raw)
	if !ok {
		a.bad = true
		return
	}
	a.counts(m, true)
}

// delta reads message_delta's usage.
func (a *anthropicUsage) delta(raw json.RawMessage) {
	m, ok := object(raw)
	if !ok {
		a.bad = true
		return
	}
	a.counts(m, false)
}

func (a *anthropicUsage) counts(m map[string]json.RawMessage, start bool) {
	for _, c := range []struct {
		key      string
		to       *int64
		required bool
	}{
		{"input_tokens", &a.input, start},
		{"cache_creation_input_tokens", &a.cacheCreation, false},
		{"cache_read_input_tokens", &a.cacheRead, false},
		{"output_tokens", &a.output, true},
	} {
		n, present, ok := count(m, c.key)
		switch {
		case !ok || c.required && !present:
			a.bad = true
		case present:
			*c.to = n
		}
	}
	if !a.bad {
		a.sawOutput = true
	}
}

// usage is what was accumulated; found only if final and nothing was
// malformed.
func (a *anthropicUsage) usage(final bool) Usage {
	if a.bad {
		return Usage{}
	}
	return Usage{Input: a.input + a.cacheCreation + a.cacheRead, Output: a.output, Found: final}
}
