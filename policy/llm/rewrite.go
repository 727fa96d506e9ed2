package llm

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
)

// Rewrite is the body to send in place of the one r was parsed from (v)
// when the proxy sets the maximum of output tokens or asks a stream for
// its usage. setMax > 0 sets every maximum key the body sets (both, for a
// chat completion that sets max_completion_tokens and max_tokens), or the
// endpoint's current key when it sets none (max_completion_tokens for chat
// completions, which OpenAI's reasoning models require); 0 leaves them.
// wantUsage adds stream_options.include_usage = true to a chat/completions
// or completions stream; other answers report usage unasked.
//
// The body is serialized again from v, so the server reads exactly the
// document that was decided on: keys come out sorted, numbers keep their
// literal text, strings are escaped as encoding/json does without its HTML
// escapes. r is not changed; after a clamp the request reserves setMax per
// choice.
func Rewrite(v ast.Value, r *Request, setMax int64, wantUsage bool) ([]byte, error) {
	obj, ok := v.(ast.Object)
	if !ok {
		return nil, fmt.Errorf("rewrite %s: body is not an object: %w", r.Endpoint, ErrMalformed)
	}
	ep, err := lookup(r.API, r.Endpoint)
	if err != nil {
		return nil, err
	}
	set := map[string]ast.Value{}
	if setMax != 0 {
		if len(ep.maxFields) == 0 {
			return nil, fmt.Errorf("rewrite %s: the endpoint has no maximum of output tokens to set", r.Endpoint)
		}
		if setMax < 1 || setMax > MaxTokenValue {
			return nil, fmt.Errorf("rewrite %s: maximum %d is not in [1, %d]", r.Endpoint, setMax, MaxTokenValue)
		}
		n := ast.Number(strconv.FormatInt(setMax, 10))
		for _, f := range ep.maxFields {
			if t := obj.Get(ast.InternedTerm(f)); t != nil && t.Value.Compare(ast.Null{}) != 0 {
				set[f] = n
			}
		}
		if len(set) == 0 {
			set[ep.maxFields[0]] = n
		}
	}
	if wantUsage && ep.usageOption && r.Stream {
		opts := ast.NewObject()
		if t := obj.Get(ast.InternedTerm("stream_options")); t != nil {
			if o, ok := t.Value.(ast.Object); ok {
				opts = o.Copy()
			}
		}
		opts.Insert(ast.InternedTerm("include_usage"), ast.InternedTerm(true))
		set["stream_options"] = opts
	}
	out := ast.NewObject()
	obj.Foreach(func(k, val *ast.Term) {
		if s, ok := k.Value.(ast.String); ok {
			if _, over := set[string(s)]; over {
				return
			}
		}
		out.Insert(k, val)
	})
	for k, val := range set {
		out.Insert(ast.StringTerm(k), ast.NewTerm(val))
	}
	return appendJSON(nil, out)
}

// lookup finds the endpoint of a parsed request.
func lookup(api, name string) (*endpoint, error) {
	for i, ep := range endpoints[api] {
		if ep.name == name {
			return &endpoints[api][i], nil
		}
	}
	return nil, fmt.Errorf("api %q endpoint %q: %w", api, name, ErrUnknownEndpoint)
}

// appendJSON appends v as JSON. v comes from the proxy's bounded parser,
// so its depth is bounded too.
func appendJSON(b []byte, v ast.Value) ([]byte, error) {
	var err error
	switch x := v.(type) {
	case ast.Null:
		return append(b, "null"...), nil
	case ast.Boolean:
		return strconv.AppendBool(b, bool(x)), nil
	case ast.Number:
		// The literal text, checked: it is sent as it was read.
		if !isNumber(string(x)) {
			return nil, fmt.Errorf("number %.40q is not a JSON number", string(x))
		}
		return append(b, x...), nil
	case ast.String:
		return appendString(b, string(x)), nil
	case *ast.Array:
		b = append(b, '[')
		for i := range x.Len() {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendJSON(b, x.Elem(i).Value); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case ast.Object:
		b = append(b, '{')
		first := true
		err = x.Iter(func(k, val *ast.Term) error {
			s, ok := k.Value.(ast.String)
			if !ok {
				return fmt.Errorf("object key is %s, not a string", ast.ValueName(k.Value))
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = appendString(b, string(s))
			b = append(b, ':')
			var err error
			b, err = appendJSON(b, val.Value)
			return err
		})
		if err != nil {
			return nil, err
		}
		return append(b, '}'), nil
	}
	return nil, fmt.Errorf("%s is not JSON", ast.ValueName(v))
}

// isNumber reports whether s is one JSON number and nothing else.
func isNumber(s string) bool {
	return s != "" && (s[0] == '-' || '0' <= s[0] && s[0] <= '9') &&
		'0' <= s[len(s)-1] && s[len(s)-1] <= '9' && json.Valid([]byte(s))
}

const hexDigits = "0123456789abcdef"

// appendString appends s quoted as encoding/json quotes it, without the
// HTML escapes: invalid UTF-8 becomes U+FFFD, as the decoder that built
// the value made it already.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			// JSON allows them; JavaScript before ES2019 did not, so
			// encoding/json escapes them and so do we.
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
