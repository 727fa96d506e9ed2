package bodyfacts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

func TestParseJSON(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	tests := []struct {
		name, in string
		want     string // the value in Rego's notation; "" = refused
	}{
		{"object", `{"a":1,"b":[true,false,null],"c":"x"}`, `{"a":1,"b":[true,false,null],"c":"x"}`},
		{"whitespace", " \t\r\n{ \"a\" : [ 1 , 2 ] } \n", `{"a":[1,2]}`},
		{"empty containers", `[{},[],""]`, `[{},[],""]`},
		{"scalar", `"s"`, `"s"`},
		{"number text kept", `[1.000000000000000000001,-0,1E400,2e-5,10]`, `[1.000000000000000000001,-0,1E400,2e-5,10]`},
		{"escapes", `"\"\\\/\b\f\n\r\t\u0041\u00e9\u20ac"`, `"\"\\/\b\f\n\r\tAé€"`},
		{"surrogate pair", `"\ud83d\ude00"`, `"😀"`},
		{"raw utf8", `"é😀\u0000"`, `"é😀\u0000"`},
		{"depth 64", deep(64), deep(64)},
		{"many keys", manyKeys(40, false), manyKeys(40, false)},
		{"exponent at the bound", `[1e1000,1E-1000,1e+0001000]`, `[1e1000,1E-1000,1e+0001000]`},
		{"number of MaxNumberLen", longNumber(MaxNumberLen), longNumber(MaxNumberLen)},

		{"empty", ``, ""},
		{"only space", `  `, ""},
		{"depth 65", deep(65), ""},
		{"depth 65 objects", strings.Repeat(`{"a":`, 65) + "1" + strings.Repeat("}", 65), ""},
		{"duplicate key", `{"a":1,"a":2}`, ""},
		{"duplicate key escaped", `{"a":1,"\u0061":2}`, ""},
		{"duplicate key nested", `{"x":{"b":1,"b":1}}`, ""},
		{"duplicate key after 16", manyKeys(40, true), ""},
		{"same key in siblings", `[{"a":1},{"a":2}]`, `[{"a":1},{"a":2}]`},
		{"lone high surrogate", `"\ud800"`, ""},
		{"lone high then char", `"\ud800x"`, ""},
		{"high then high", `"\ud800\ud800"`, ""},
		{"lone low surrogate", `"\udc00"`, ""},
		{"invalid utf8", "\"\xff\"", ""},
		{"invalid utf8 in key", "{\"\xc3\":1}", ""},
		{"encoded surrogate", "\"\xed\xa0\x80\"", ""},
		{"overlong", "\"\xc0\xaf\"", ""},
		{"invalid utf8 after escape", "\"\\n\xff\"", ""},
		{"bom", "\xef\xbb\xbf{}", ""},
		{"trailing value", `{} {}`, ""},
		{"trailing garbage", `1x`, ""},
		{"trailing comma array", `[1,]`, ""},
		{"trailing comma object", `{"a":1,}`, ""},
		{"leading zero", `01`, ""},
		{"plus", `+1`, ""},
		{"bare dot", `1.`, ""},
		{"dot first", `.5`, ""},
		{"empty exponent", `1e`, ""},
		{"minus alone", `-`, ""},
		{"hex", `0x10`, ""},
		{"nan", `NaN`, ""},
		{"single quotes", `'a'`, ""},
		{"unquoted key", `{a:1}`, ""},
		{"non-string key", `{1:1}`, ""},
		{"control char", "\"a\tb\"", ""},
		{"bad escape", `"\x41"`, ""},
		{"short unicode escape", `"\u41"`, ""},
		{"unterminated string", `"abc`, ""},
		{"unterminated array", `[1,2`, ""},
		{"unterminated object", `{"a":1`, ""},
		{"missing colon", `{"a" 1}`, ""},
		{"truncated literal", `tru`, ""},
		{"capital literal", `True`, ""},
		{"comment", `{} // x`, ""},
		{"nul outside string", "{}\x00", ""},
		{"exponent over the bound", `1e1001`, ""},
		{"negative exponent over the bound", `[1E-1001]`, ""},
		{"huge exponent", `1e99999999999999999999999`, ""},
		{"number over MaxNumberLen", longNumber(MaxNumberLen + 1), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseJSON([]byte(tt.in))
			if tt.want == "" {
				if err == nil {
					t.Fatalf("ParseJSON(%q) = %v; want an error", tt.in, got)
				}
				if !errors.Is(err, ErrUnparseable) {
					t.Fatalf("ParseJSON(%q) error %v; want ErrUnparseable", tt.in, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseJSON(%q) error %v", tt.in, err)
			}
			want := ast.MustParseTerm(tt.want).Value
			if got.Compare(want) != 0 {
				t.Fatalf("ParseJSON(%q) = %v; want %v", tt.in, got, want)
			}
		})
	}
}

// manyKeys is an object of n keys; with dup its last key repeats the
// first, past the keys dup scans.
func manyKeys(n int, dup bool) string {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		k := i
		if dup && i == n-1 {
			k = 0
		}
		b.WriteString(`"k` + strings.Repeat("x", k) + `":1`)
	}
	b.WriteString("}")
	return b.String()
}

// longNumber is a number of n bytes with an exponent.
func longNumber(n int) string {
	return "-1." + strings.Repeat("9", n-9) + "e-1000"
}

// TestParseJSONNumbersRego pins that Rego can compare and compute with the
// numbers at ParseJSON's bounds: OPA panics on exponents past ±1e6.
func TestParseJSONNumbersRego(t *testing.T) {
	for _, in := range []string{`1e1000`, `-1e-1000`, longNumber(MaxNumberLen), strings.Replace(longNumber(MaxNumberLen), "-1000", "+1000", 1), `-0.0`, `0e5`} {
		v, err := ParseJSON([]byte(in))
		if err != nil {
			t.Fatalf("ParseJSON(%s) error %v", in, err)
		}
		for _, q := range []string{`input.x == 5`, `input.x < 5.5`, `input.x + 1 != 0`, `input.x in {5, 6}`, `input.x == input.y`} {
			input := ast.NewObject(ast.Item(ast.StringTerm("x"), ast.NewTerm(v)), ast.Item(ast.StringTerm("y"), ast.NumberTerm("1e999")))
			if _, err := rego.New(rego.Query(q), rego.ParsedInput(input)).Eval(context.Background()); err != nil {
				t.Fatalf("%s with input.x = %s: %v", q, in, err)
			}
		}
	}
}

// TestParseJSONNumberText pins that a number reaches Rego as its literal
// text, never through a float64.
func TestParseJSONNumberText(t *testing.T) {
	v, err := ParseJSON([]byte(`12345678901234567890123`))
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := v.(ast.Number); !ok || string(n) != "12345678901234567890123" {
		t.Fatalf("ParseJSON(12345678901234567890123) = %#v; want the same text as ast.Number", v)
	}
}

// TestParseJSONLinear parses bodies that punish a quadratic parser: long
// strings, many keys, wide arrays at the depth bound.
func TestParseJSONLinear(t *testing.T) {
	const n = 1 << 18
	wide := strings.Repeat("[", MaxDepth-1) + "[" + strings.Repeat("1,", n) + "1]" + strings.Repeat("]", MaxDepth-1)
	for _, in := range []string{
		`"` + strings.Repeat(`\u00e9`, n) + `"`,
		manyKeys(4096, false),
		wide,
	} {
		if _, err := ParseJSON([]byte(in)); err != nil {
			t.Fatalf("ParseJSON(%.40q…) error %v", in, err)
		}
	}
}

// FuzzParseJSON checks ParseJSON against encoding/json both ways: what
// encoding/json accepts, ParseJSON accepts with the same value unless the
// input is one ParseJSON refuses on purpose (invalid UTF-8, a duplicate
// key, too deep, a number out of bounds, a lone surrogate); what
// ParseJSON accepts, encoding/json accepts, and it has none of those.
func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"b":[true,false,null],"c":"x"}`, `{"a":1,"\u0061":2}`, `"\ud83d\ude00"`, `"\ud800"`,
		"\"\xff\"", "\xef\xbb\xbf{}", `[1.5e10,-0,0.0]`, `1e1001`, `[1e-1000]`,
		`{"a":{"a":{}}}`, `[[[[]]]]`, ` 1 `, `01`, `"\u00e9"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := ParseJSON(in)
		strict := json.Valid(in) && utf8.Valid(in) && !hasDupKey(in) && depth(in) <= MaxDepth && numbersInBounds(in)
		switch {
		case err != nil && !errors.Is(err, ErrUnparseable):
			t.Fatalf("ParseJSON(%q) error %v; want ErrUnparseable", in, err)
		case err == nil && !strict:
			t.Fatalf("ParseJSON(%q) = %v; encoding/json (valid %v, UTF-8 %v, dup %v, depth %d, numbers in bounds %v) refuses it",
				in, got, json.Valid(in), utf8.Valid(in), hasDupKey(in), depth(in), numbersInBounds(in))
		case err != nil && strict && !maySurrogate(in):
			t.Fatalf("ParseJSON(%q) error %v; encoding/json accepts it", in, err)
		case err == nil:
			d := json.NewDecoder(bytes.NewReader(in))
			d.UseNumber()
			var want any
			if err := d.Decode(&want); err != nil {
				t.Fatalf("json.Decode(%q) error %v", in, err)
			}
			gotJSON, err := ast.JSON(got)
			if err != nil {
				t.Fatalf("ast.JSON(%v) error %v", got, err)
			}
			if !reflect.DeepEqual(gotJSON, want) {
				t.Fatalf("ParseJSON(%q) = %#v; encoding/json %#v", in, gotJSON, want)
			}
			// Rego compares numbers through math/big, which must bear
			// every number accepted (it panicked past ±1e6 exponents).
			ast.WalkTerms(got, func(x *ast.Term) bool {
				if n, ok := x.Value.(ast.Number); ok {
					ast.NumberCompare(n, "5")
					ast.NumberCompare(n, "1.5")
				}
				return false
			})
		}
	})
}

// hasDupKey says whether an object in in (valid JSON) repeats a key after
// unescaping, walking encoding/json's tokens.
func hasDupKey(in []byte) bool {
	d := json.NewDecoder(bytes.NewReader(in))
	d.UseNumber()
	type frame struct {
		keys  map[string]bool
		isObj bool
		atKey bool
	}
	var stack []*frame
	for {
		tok, err := d.Token()
		if err != nil {
			return false // io.EOF, or invalid: the other checks refuse it
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.isObj && top.atKey {
			if k, ok := tok.(string); ok {
				if top.keys[k] {
					return true
				}
				top.keys[k] = true
				top.atKey = false
				continue
			}
		}
		if top != nil && top.isObj {
			top.atKey = true // a value comes, then a key
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]bool{}, isObj: true, atKey: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
	}
}

// numbersInBounds says whether every number encoding/json decodes from in
// is within MaxNumberLen and MaxExponent.
func numbersInBounds(in []byte) bool {
	d := json.NewDecoder(bytes.NewReader(in))
	d.UseNumber()
	for {
		tok, err := d.Token()
		if err != nil {
			return true
		}
		n, ok := tok.(json.Number)
		if !ok {
			continue
		}
		if len(n) > MaxNumberLen {
			return false
		}
		if i := strings.IndexAny(string(n), "eE"); i >= 0 {
			e, err := strconv.Atoi(strings.TrimLeft(string(n[i+1:]), "+-"))
			if err != nil || e > MaxExponent {
				return false
			}
		}
	}
}

// depth is the deepest nesting of arrays and objects in in, counting
// brackets outside strings.
func depth(in []byte) int {
	d, most, inStr := 0, 0, false
	for i := 0; i < len(in); i++ {
		switch c := in[i]; {
		case inStr && c == '\\':
			i++
		case c == '"':
			inStr = !inStr
		case !inStr && (c == '[' || c == '{'):
			d++
			most = max(most, d)
		case !inStr && (c == ']' || c == '}'):
			d--
		}
	}
	return most
}

// maySurrogate says whether in holds a \u escape in the surrogate range,
// which ParseJSON refuses unless it is a well-formed pair: encoding/json
// replaces a lone one with U+FFFD, so it cannot witness either way, and
// the pairs are checked by the other direction and the table.
func maySurrogate(in []byte) bool {
	s := strings.ToLower(string(in))
	for _, p := range []string{`\ud8`, `\ud9`, `\uda`, `\udb`, `\udc`, `\udd`, `\ude`, `\udf`} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// BenchmarkParseJSON parses an MCP tools/call request and a model request
// padded to 1 MiB of messages.
func BenchmarkParseJSON(b *testing.B) {
	call := []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"ticket.create",` +
		`"arguments":{"title":"Printer on fire","priority":2,"labels":["hw","urgent"],"capability":"simulate"}}}`)
	msg := `{"role":"user","content":"` + strings.Repeat("lorem ipsum \u00e9 ", 60) + `"},`
	model := []byte(`{"model":"gpt-x","max_tokens":1024,"messages":[` +
		strings.Repeat(msg, (1<<20)/len(msg)) + `{"role":"user","content":"end"}]}`)
	for _, bb := range []struct {
		name string
		in   []byte
	}{{"mcp", call}, {"model_1MiB", model}} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bb.in)))
			for b.Loop() {
				if _, err := ParseJSON(bb.in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
