package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// chunked reads src in the chunk sizes sizes gives, cycling, each in
// [1, 64].
type chunked struct {
	src   []byte
	sizes []byte
	i     int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.src) == 0 {
		return 0, io.EOF
	}
	n := 1
	if len(c.sizes) > 0 {
		n = int(c.sizes[c.i%len(c.sizes)])%64 + 1
		c.i++
	}
	n = min(n, len(p), len(c.src))
	copy(p, c.src[:n])
	c.src = c.src[n:]
	return n, nil
}

// wholeText frames stream the naive way: all of it at once, line ends
// made LF, split into lines, and feeds the events to a usageStream. It
// shares only the event interpretation with UsageSSE.
func wholeText(api, endpoint string, stream []byte) Usage {
	s := strings.ReplaceAll(string(stream), "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	s = strings.TrimPrefix(s, "\ufeff")
	st := usageStream{api: api, endpoint: endpoint}
	lines := strings.Split(s, "\n")
	// The last piece has no line end: an unfinished line, dropped.
	lines = lines[:len(lines)-1]
	var typ string
	var data []string
	for _, line := range lines {
		if st.stopped {
			break
		}
		if line == "" {
			if data != nil {
				st.event(typ, []byte(strings.Join(data, "\n")))
			}
			typ, data = "", nil
			continue
		}
		if line[0] == ':' {
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "event":
			typ = value
		case "data":
			data = append(data, value)
		}
	}
	return st.usage()
}

var fuzzAPIs = []struct{ api, endpoint string }{
	{APIOpenAI, EndpointChat}, {APIOpenAI, EndpointCompletions}, {APIOpenAI, EndpointResponses},
	{APIAnthropic, EndpointMessages},
}

// FuzzUsageSSE: whatever the chunking, UsageSSE passes the stream on byte
// for byte and reads the usage a naive whole-text framing reads.
func FuzzUsageSSE(f *testing.F) {
	for i, c := range sseCases {
		for j, a := range fuzzAPIs {
			if a.api == c.api && a.endpoint == c.endpoint {
				f.Add(uint8(j), []byte(c.stream), []byte{byte(i), 3, 17, 0})
			}
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, stream, sizes []byte) {
		a := fuzzAPIs[int(which)%len(fuzzAPIs)]
		want := wholeText(a.api, a.endpoint, stream)
		calls := 0
		var got Usage
		out, err := io.ReadAll(UsageSSE(a.api, a.endpoint, &chunked{src: stream, sizes: sizes}, func(u Usage) { calls++; got = u }))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, stream) {
			t.Fatalf("passed %q; want %q", out, stream)
		}
		if calls != 1 || got != want {
			t.Fatalf("%s %s %q: done called %d times with %+v; the whole text reads %+v", a.api, a.endpoint, stream, calls, got, want)
		}
	})
}

// fuzzPaths are the paths FuzzParse picks from; the last byte of the
// selector may also pick the fuzzed path itself.
var fuzzPaths = []struct{ api, path string }{
	{APIOpenAI, "/v1/chat/completions"}, {APIOpenAI, "/v1/responses"}, {APIOpenAI, "/v1/completions"},
	{APIOpenAI, "/v1/embeddings"}, {APIAnthropic, "/v1/messages"}, {APIAnthropic, "/v1/messages/count_tokens"},
}

// oracle is how a server decoding with encoding/json into a struct reads
// the fields Parse reads.
type oracle struct {
	Model               *string `json:"model"`
	MaxCompletionTokens *int64  `json:"max_completion_tokens"`
	MaxTokens           *int64  `json:"max_tokens"`
	MaxOutputTokens     *int64  `json:"max_output_tokens"`
	N                   *int64  `json:"n"`
	BestOf              *int64  `json:"best_of"`
	Stream              *bool   `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
}

// decodeOracle decodes body as a server of endpoint would: into a struct
// of the fields that endpoint takes.
func decodeOracle(endpoint, body string) (oracle, error) {
	type streamOptions = struct {
		IncludeUsage *bool `json:"include_usage"`
	}
	var o oracle
	var err error
	switch endpoint {
	case EndpointChat:
		var q struct {
			Model               *string
			MaxCompletionTokens *int64 `json:"max_completion_tokens"`
			MaxTokens           *int64 `json:"max_tokens"`
			N                   *int64
			Stream              *bool
			StreamOptions       *streamOptions `json:"stream_options"`
		}
		err = json.Unmarshal([]byte(body), &q)
		o.Model, o.MaxCompletionTokens, o.MaxTokens, o.N, o.Stream, o.StreamOptions = q.Model, q.MaxCompletionTokens, q.MaxTokens, q.N, q.Stream, q.StreamOptions
	case EndpointCompletions:
		var q struct {
			Model     *string
			MaxTokens *int64 `json:"max_tokens"`
			N         *int64
			BestOf    *int64 `json:"best_of"`
			Stream    *bool
			Options   *streamOptions `json:"stream_options"`
		}
		err = json.Unmarshal([]byte(body), &q)
		o.Model, o.MaxTokens, o.N, o.BestOf, o.Stream, o.StreamOptions = q.Model, q.MaxTokens, q.N, q.BestOf, q.Stream, q.Options
	case EndpointResponses:
		var q struct {
			Model     *string
			MaxOutput *int64 `json:"max_output_tokens"`
			Stream    *bool
		}
		err = json.Unmarshal([]byte(body), &q)
		o.Model, o.MaxOutputTokens, o.Stream = q.Model, q.MaxOutput, q.Stream
	case EndpointMessages:
		var q struct {
			Model     *string
			MaxTokens *int64 `json:"max_tokens"`
			Stream    *bool
		}
		err = json.Unmarshal([]byte(body), &q)
		o.Model, o.MaxTokens, o.Stream = q.Model, q.MaxTokens, q.Stream
	default:
		var q struct{ Model *string }
		err = json.Unmarshal([]byte(body), &q)
		o.Model = q.Model
	}
	return o, err
}

// request is the request the oracle's fields make for endpoint.
func (o *oracle) request(api, endpoint string) Request {
	r := Request{API: api, Endpoint: endpoint, Choices: 1, IncludeUsage: true}
	if o.Model != nil {
		r.Model = *o.Model
	}
	setMax := func(field string, v *int64) {
		if v != nil && (!r.HasMax || *v > r.MaxOutputTokens) {
			r.MaxOutputTokens, r.HasMax, r.MaxField = *v, true, field
		}
	}
	choices := func(v *int64) {
		if v != nil && *v > r.Choices {
			r.Choices = *v
		}
	}
	stream := func(usageOption bool) {
		r.Stream = o.Stream != nil && *o.Stream
		if usageOption {
			r.IncludeUsage = !r.Stream || o.StreamOptions != nil && o.StreamOptions.IncludeUsage != nil && *o.StreamOptions.IncludeUsage
		}
	}
	switch endpoint {
	case EndpointChat:
		setMax("max_completion_tokens", o.MaxCompletionTokens)
		setMax("max_tokens", o.MaxTokens)
		choices(o.N)
		stream(true)
	case EndpointCompletions:
		setMax("max_tokens", o.MaxTokens)
		choices(o.N)
		choices(o.BestOf)
		stream(true)
	case EndpointResponses:
		setMax("max_output_tokens", o.MaxOutputTokens)
		stream(false)
	case EndpointMessages:
		setMax("max_tokens", o.MaxTokens)
		stream(false)
	case EndpointEmbeddings, EndpointCountTokens:
		r.HasMax = true
	}
	return r
}

// FuzzParse: Parse never panics, and what it accepts a server decoding
// the same body with encoding/json into a struct reads the same way; and
// a body that such a server reads within Parse's bounds, with no key that
// only case-folds to one read, Parse accepts.
func FuzzParse(f *testing.F) {
	for i := range fuzzPaths {
		f.Add(uint8(i), "", `{"model":"gpt-4o","max_completion_tokens":10,"max_tokens":20,"n":2,"stream":true,"stream_options":{"include_usage":true}}`)
		f.Add(uint8(i), "", `{"model":"m","max_tokens":1024,"best_of":3,"max_output_tokens":5,"stream":false,"stream_options":null}`)
	}
	f.Add(uint8(0), "", `{"model":"a","Model":"b"}`)
	f.Add(uint8(4), "", `{"model":"m","max_tokens":1e3}`)
	f.Add(uint8(255), "/openai/v1/chat/completions", `{"model":"m"}`)
	f.Fuzz(func(t *testing.T, which uint8, fuzzPath, body string) {
		p := fuzzPaths[int(which)%len(fuzzPaths)]
		path := p.path
		if which >= 128 {
			path = fuzzPath
		}
		if !json.Valid([]byte(body)) {
			return // the proxy's parser refuses it before Parse
		}
		d := json.NewDecoder(strings.NewReader(body))
		d.UseNumber()
		var x any
		if d.Decode(&x) != nil {
			return
		}
		v, err := ast.InterfaceToValue(x)
		if err != nil {
			return
		}
		got, err := Parse(p.api, path, v)
		if errors.Is(err, ErrUnknownEndpoint) {
			return
		}
		if got != nil && (!strings.HasSuffix(path, "/"+got.Endpoint) || strings.ContainsAny(path, "%;")) {
			t.Fatalf("Parse took path %q for %s", path, got.Endpoint)
		}
		endpoint := ""
		if got != nil {
			endpoint = got.Endpoint
		} else if ep, err := match(endpoints[p.api], path); err == nil {
			endpoint = ep.name
		}
		o, oerr := decodeOracle(endpoint, body)
		if err == nil {
			if oerr != nil {
				t.Fatalf("Parse accepted %s; encoding/json: %v", body, oerr)
			}
			if want := o.request(p.api, endpoint); *got != want {
				t.Fatalf("Parse(%s) = %+v; encoding/json reads %+v", body, *got, want)
			}
			checkRewrite(t, v, got, x)
			return
		}
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("Parse(%s) = %v; want ErrMalformed or ErrUnknownEndpoint", body, err)
		}
		// Refused: so encoding/json must fail, or read something out of
		// Parse's bounds, or there is a key that only folds to one read.
		if oerr != nil || !isObject([]byte(body)) {
			return
		}
		want := o.request(p.api, endpoint)
		inBounds := want.Model != "" && len(want.Model) <= MaxModelBytes && want.Choices <= MaxChoices &&
			(!want.HasMax || want.MaxField == "" || want.MaxOutputTokens >= 1 && want.MaxOutputTokens <= MaxTokenValue) &&
			positive(o.N) && positive(o.BestOf) && positive(o.MaxTokens) && positive(o.MaxCompletionTokens) && positive(o.MaxOutputTokens) &&
			o.Model != nil
		if inBounds && !hasFoldedKey(x) && exactTypes(x, endpoint) {
			t.Fatalf("Parse(%s) = %v; encoding/json reads %+v, within bounds", body, err, want)
		}
	})
}

// checkRewrite: the body Rewrite sends unchanged is the same document
// (numbers with the same text), and Parse reads the request from it.
func checkRewrite(t *testing.T, v ast.Value, r *Request, x any) {
	b, err := Rewrite(v, r, 0, false)
	if err != nil {
		t.Fatalf("Rewrite of an accepted body: %v", err)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var y any
	if err := d.Decode(&y); err != nil || !json.Valid(b) {
		t.Fatalf("Rewrite sent %q, not JSON: %v", b, err)
	}
	if !reflect.DeepEqual(x, y) {
		t.Fatalf("Rewrite sent %s; another document than %v", b, x)
	}
	yv, err := ast.InterfaceToValue(y)
	if err != nil {
		t.Fatal(err)
	}
	path := map[string]string{EndpointChat: "/v1/chat/completions", EndpointResponses: "/v1/responses", EndpointCompletions: "/v1/completions",
		EndpointEmbeddings: "/v1/embeddings", EndpointMessages: "/v1/messages", EndpointCountTokens: "/v1/messages/count_tokens"}[r.Endpoint]
	again, err := Parse(r.API, path, yv)
	if err != nil || *again != *r {
		t.Fatalf("Parse of the body sent = %+v, %v; decided %+v", again, err, *r)
	}
}

func positive(v *int64) bool { return v == nil || *v >= 1 && *v <= MaxTokenValue }

// hasFoldedKey: a key of the body or of its stream_options that is not a
// field name but equals one without regard to case.
func hasFoldedKey(x any) bool {
	names := []string{"model", "max_completion_tokens", "max_tokens", "max_output_tokens", "n", "best_of", "stream", "stream_options", "include_usage"}
	var walk func(m map[string]any) bool
	walk = func(m map[string]any) bool {
		for k, v := range m {
			for _, n := range names {
				if k != n && strings.EqualFold(k, n) {
					return true
				}
			}
			if k == "stream_options" {
				if o, ok := v.(map[string]any); ok && walk(o) {
					return true
				}
			}
		}
		return false
	}
	m, ok := x.(map[string]any)
	return ok && walk(m)
}

// exactTypes: the fields an endpoint reads hold what Parse reads, where
// encoding/json would also take null for "not set", and a model of the
// wrong type is caught by encoding/json already.
func exactTypes(x any, endpoint string) bool {
	m, _ := x.(map[string]any)
	s, ok := m["model"].(string)
	return ok && s != "" && endpoint != ""
}

// FuzzMember: member reads of a valid object what encoding/json decodes
// into a map, for the keys usage is read by and any ASCII key.
func FuzzMember(f *testing.F) {
	f.Add(`{"usage":null,"choices":[{"delta":{"content":"}\"{"}}],"usage":{"a":[1,{"b":"]"}]}}`)
	f.Add(`{"\u0075sage": 1, "type" : "message_start" , "x":"\\"}`)
	f.Add(`{}`)
	f.Fuzz(func(t *testing.T, data string) {
		if !isObject([]byte(data)) {
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("isObject(%q) but %v", data, err)
		}
		keys := []string{"usage", "error", "response", "type", "message", ""}
		for k := range m {
			ascii := true
			for i := range len(k) {
				ascii = ascii && k[i] < 0x80
			}
			if ascii {
				keys = append(keys, k)
			}
		}
		for _, k := range keys {
			got, ok := member([]byte(data), k)
			want, has := m[k]
			if ok != has || !bytes.Equal(got, want) {
				t.Fatalf("member(%q, %q) = %q, %v; encoding/json reads %q, %v", data, k, got, ok, want, has)
			}
		}
	})
}
