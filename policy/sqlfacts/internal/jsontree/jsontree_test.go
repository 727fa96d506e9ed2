package jsontree

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// toAny converts the value v of d as encoding/json (with UseNumber) would
// decode it.
func toAny(d *Doc, v int32) any {
	x := d.vals[v]
	switch x.kind {
	case Null:
		return nil
	case True:
		return true
	case False:
		return false
	case Number:
		return json.Number(d.src[x.off:x.end])
	case String:
		return d.Str(v)
	case Array:
		a := []any{}
		for e := v + 1; e < x.next; e = d.vals[e].next {
			a = append(a, toAny(d, e))
		}
		return a
	}
	m := map[string]any{}
	for k := v + 1; k < x.next; k = d.vals[k+1].next {
		m[d.Str(k)] = toAny(d, k+1)
	}
	return m
}

func stdDecode(s string) (any, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

func TestJSONParse(t *testing.T) {
	tests := []struct {
		name, in string
	}{
		{"empty object", `{}`},
		{"scalars", `[null,true,false,0,-1,2.5e-3,1E+2,"x"]`},
		{"nested", ` { "a" : [ {"b":{}} , [] ], "c":{"d":[1,[2,[3]]]} } `},
		{"escapes", `["a\"b","c\\d","\n\t\r\b\f\/","\u003e\u003C","\u00e9","\ud83d\ude00"]`},
		{"lone surrogate", `["\ud800","\udc00x","\ud800\u0041"]`},
		{"utf8 raw", `{"ключ":"значение ✓"}`},
		{"duplicate keys", `{"a":1,"a":2}`},
		{"pg_query shape", `{"version":160001,"stmts":[{"stmt":{"SelectStmt":{"targetList":[{"ResTarget":{"val":{"A_Const":{"ival":{"ival":1},"location":7}},"location":7}}],"limitOption":"LIMIT_OPTION_DEFAULT","op":"SETOP_NONE"}}}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Acquire()
			defer d.Release()
			if err := d.Parse(tt.in); err != nil {
				t.Fatalf("parse(%q) = %v; want nil", tt.in, err)
			}
			want, err := stdDecode(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := toAny(d, 0); !reflect.DeepEqual(got, want) {
				t.Errorf("parse(%q) = %#v; want %#v", tt.in, got, want)
			}
		})
	}
}

func TestJSONMalformed(t *testing.T) {
	tests := []struct {
		name, in string
	}{
		{"empty", ``},
		{"space", `  `},
		{"unclosed object", `{"a":1`},
		{"unclosed array", `[1,2`},
		{"unclosed string", `["abc]`},
		{"trailing comma", `[1,]`},
		{"trailing object comma", `{"a":1,}`},
		{"missing colon", `{"a" 1}`},
		{"non-string key", `{1:2}`},
		{"mismatched close", `[1}`},
		{"extra close", `[1]]`},
		{"trailing data", `{} {}`},
		{"bad literal", `[tru]`},
		{"bad escape", `["\x"]`},
		{"short unicode escape", `["\u12"]`},
		{"non-hex unicode escape", `["\u12zz"]`},
		{"escape at end", `"\`},
		{"control character", "[\"a\nb\"]"},
		{"leading zero", `[01]`},
		{"bare minus", `[-]`},
		{"bare dot", `[1.]`},
		{"bare exponent", `[1e]`},
		{"plus sign", `[+1]`},
		{"missing value", `{"a":}`},
		{"comma first", `[,1]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Acquire()
			defer d.Release()
			if err := d.Parse(tt.in); err == nil {
				t.Errorf("parse(%q) = nil; want an error", tt.in)
			}
		})
	}
}

// TestJSONDeep is the reason for an iterative parser: a parse tree near
// the pre-scan's limits is thousands of levels deep, beyond the depth
// limits of common JSON libraries.
func TestJSONDeep(t *testing.T) {
	const n = 200000
	in := strings.Repeat(`{"a":[`, n) + strings.Repeat(`]}`, n)
	d := Acquire()
	defer d.Release()
	if err := d.Parse(in); err != nil {
		t.Fatalf("parse(%d levels) = %v; want nil", 2*n, err)
	}
	if got, want := len(d.vals), 3*n; got != want {
		t.Errorf("parse(%d levels) = %d values; want %d", 2*n, got, want)
	}
}

func TestJSONAccessors(t *testing.T) {
	d := Acquire()
	defer d.Release()
	if err := d.Parse(`{"s":"a\u003eb","n":-42,"big":1e3,"t":true,"l":[1,{"x":null},"z"],"e":{}}`); err != nil {
		t.Fatal(err)
	}
	if got := d.Str(d.Get(0, "s")); got != "a>b" {
		t.Errorf(`str(s) = %q; want "a>b"`, got)
	}
	if got := d.Str(d.Get(0, "missing")); got != "" {
		t.Errorf(`str(missing) = %q; want ""`, got)
	}
	if got, err := d.Int(d.Get(0, "n")); got != -42 || err != nil {
		t.Errorf("int(n) = %d, %v; want -42, nil", got, err)
	}
	if _, err := d.Int(d.Get(0, "big")); err == nil {
		t.Errorf("int(big) = nil error; want an error for a non-integer")
	}
	if _, err := d.Int(d.Get(0, "s")); err == nil {
		t.Errorf("int(s) = nil error; want an error for a string")
	}
	if !d.Truthy(d.Get(0, "t")) || d.Truthy(d.Get(0, "n")) || d.Truthy(-1) {
		t.Errorf("truthy wrong")
	}
	var kinds []Kind
	_ = d.Items(d.Get(0, "l"), func(e int32) error {
		kinds = append(kinds, d.vals[e].kind)
		return nil
	})
	if want := []Kind{Number, Object, String}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("items(l) kinds = %v; want %v", kinds, want)
	}
	if d.NonEmpty(d.Get(0, "e")) || !d.NonEmpty(d.Get(0, "l")) {
		t.Errorf("nonEmpty wrong")
	}
}

// FuzzJSON checks the parser against encoding/json: the same documents
// are accepted, and they decode to the same values.
func FuzzJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `{"a":[1,-2.5e3,true,false,null,"x\"\\\/\b\f\n\r\t\u003e\ud83d\ude00"]}`,
		`{"stmts":[{"stmt":{"SelectStmt":{"targetList":[]}},"stmt_len":9}]}`,
		`[`, `{"a"}`, `"\ud800"`, `[01]`, `{"a":1,}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d := Acquire()
		defer d.Release()
		err := d.Parse(s)
		// encoding/json stops at 10,000 levels, and decodes invalid UTF-8
		// as U+FFFD: compare only where it is exact.
		if len(s) > 10000 || !utf8.ValidString(s) {
			return
		}
		if valid := json.Valid([]byte(s)); (err == nil) != valid {
			t.Fatalf("parse(%q) = %v; json.Valid = %v", s, err, valid)
		}
		if err != nil {
			return
		}
		want, err := stdDecode(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := toAny(d, 0); !reflect.DeepEqual(got, want) {
			t.Fatalf("parse(%q) = %#v; want %#v", s, got, want)
		}
	})
}
