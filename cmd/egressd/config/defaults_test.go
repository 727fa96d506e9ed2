package config

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// exampleFile is the example config that documents every key with its
// default.
const exampleFile = "../../../deploy/egressd.yaml"

func readExample(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatalf("read example config: %v", err)
	}
	return b
}

// TestExampleIsTheDefaults: deploy/egressd.yaml, decoded strictly into a
// zero Config and provisioned, is exactly the provisioned zero Config, so
// every value it shows is the one the code uses (issue 13 item 4).
func TestExampleIsTheDefaults(t *testing.T) {
	var got Config
	dec := yaml.NewDecoder(bytes.NewReader(readExample(t)))
	dec.KnownFields(true)
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("decode %s: %v", exampleFile, err)
	}
	got.Provision()
	var want Config
	want.Provision()
	nilEmptyLists(reflect.ValueOf(&got).Elem())
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s provisioned = %+v; want the provisioned zero config %+v", exampleFile, got, want)
	}
	parsed, err := Parse(readExample(t))
	if err == nil {
		nilEmptyLists(reflect.ValueOf(parsed).Elem())
	}
	if err != nil || !reflect.DeepEqual(parsed, &want) {
		t.Errorf("Parse(%s) = %+v, %v; want the defaults %+v", exampleFile, parsed, err, want)
	}
}

// TestExampleListsEveryKey: every key of the file format appears in
// deploy/egressd.yaml, which says it shows every key.
func TestExampleListsEveryKey(t *testing.T) {
	var root yaml.Node
	if err := yaml.Unmarshal(readExample(t), &root); err != nil {
		t.Fatalf("parse %s: %v", exampleFile, err)
	}
	have := map[string]bool{}
	leafKeys(root.Content[0], "", have)
	var missing []string
	for _, k := range structKeys(reflect.TypeFor[Config](), "") {
		if !have[k] {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("%s lacks keys %v", exampleFile, missing)
	}
}

// TestZeroMeansDefault: every scalar key of the example set to its zero
// value ("", 0, 0s) parses to the defaults, in every section: zero means
// the documented default (issue 13 item 4; audit.sync_interval: 0s,
// audit.queue_size: 0 and policy.eval_timeout: 0s were rejected).
func TestZeroMeansDefault(t *testing.T) {
	var root yaml.Node
	if err := yaml.Unmarshal(readExample(t), &root); err != nil {
		t.Fatalf("parse %s: %v", exampleFile, err)
	}
	want := Default()
	for _, sec := range mappingPairs(root.Content[0]) {
		for _, kv := range mappingPairs(sec[1]) {
			if kv[1].Kind != yaml.ScalarNode {
				continue
			}
			key := sec[0].Value + "." + kv[0].Value
			t.Run(key, func(t *testing.T) {
				in := sec[0].Value + ":\n  " + kv[0].Value + ": " + zeroOf(kv[1].Value) + "\n"
				got, err := Parse([]byte(in))
				if err != nil {
					t.Fatalf("Parse(%q) error = %v; want the defaults", in, err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("Parse(%q) = %+v; want the defaults %+v", in, got, want)
				}
			})
		}
	}
}

// nilEmptyLists sets the empty lists under v to nil: the example writes
// `upstreams: []` for an empty list, which YAML decodes to an empty, non-nil
// slice that every section treats as nil. (audit.redact_query_params, where
// [] and absent differ, is not empty in the example.)
func nilEmptyLists(v reflect.Value) {
	switch v.Kind() {
	case reflect.Slice:
		if v.Len() == 0 {
			v.SetZero()
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				nilEmptyLists(v.Field(i))
			}
		}
	}
}

// zeroOf spells the zero value of the kind of v.
func zeroOf(v string) string {
	if _, err := time.ParseDuration(v); err == nil && strings.ContainsAny(v, "hms") {
		return "0s"
	}
	if v != "" && strings.Trim(v, "0123456789.-") == "" {
		return "0"
	}
	return `""`
}

func mappingPairs(n *yaml.Node) [][2]*yaml.Node {
	var out [][2]*yaml.Node
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		out = append(out, [2]*yaml.Node{n.Content[i], n.Content[i+1]})
	}
	return out
}

// leafKeys records the dotted path of every key under n.
func leafKeys(n *yaml.Node, prefix string, have map[string]bool) {
	for _, kv := range mappingPairs(n) {
		path := kv[0].Value
		if prefix != "" {
			path = prefix + "." + path
		}
		have[path] = true
		leafKeys(kv[1], path, have)
	}
}

// structKeys lists the dotted yaml keys of t's fields, descending into
// struct fields (sequences, such as identities and internal, are one key).
func structKeys(t reflect.Type, prefix string) []string {
	var out []string
	for f := range t.Fields() {
		tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "-" || !f.IsExported() {
			continue
		}
		path := tag
		if prefix != "" {
			path = prefix + "." + tag
		}
		out = append(out, path)
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Duration]() {
			out = append(out, structKeys(f.Type, path)...)
		}
	}
	return out
}

// sectionFiles hold the types of the file's sections.
var sectionFiles = map[string][]string{
	"config.go":                       {"Log", "Admin"},
	"../../../proxy/config.go":        {"Config"},
	"../../../policy/config.go":       {"Config"},
	"../../../dnsguard/config.go":     {"Config"},
	"../../../audit/config.go":        {"Config"},
	"../../../proxy/pggate/config.go": {"Config"},
	"../../../proxy/ca/config.go":     {"Config"},
}

// saysZero matches a field doc that says what its zero value does.
var saysZero = regexp.MustCompile(`(?i)\b(zero|empty|nil|no default)\b`)

// TestFieldDocsSayWhatZeroMeans: every key's field doc says what leaving
// it out does, so the contract "zero means the documented default" has a
// documented default to mean. A field without a doc shares the one above
// it (MinTTL and MaxTTL).
func TestFieldDocsSayWhatZeroMeans(t *testing.T) {
	fset := token.NewFileSet()
	for file, types := range sectionFiles {
		f, err := parser.ParseFile(fset, file, nil, parser.ParseComments)
		if err != nil {
			t.Fatalf("parse %s: %v", file, err)
		}
		for _, name := range types {
			st := structType(f, name)
			if st == nil {
				t.Fatalf("%s: no struct type %s", file, name)
			}
			doc := ""
			for _, fld := range st.Fields.List {
				if fld.Doc != nil {
					doc = fld.Doc.Text()
				}
				if fld.Tag == nil || strings.Contains(fld.Tag.Value, `yaml:"-"`) {
					continue
				}
				if !saysZero.MatchString(doc) {
					t.Errorf("%s: %s.%s's doc does not say what zero means: %q", file, name, fld.Names[0].Name, doc)
				}
			}
		}
	}
}

func structType(f *ast.File, name string) *ast.StructType {
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, s := range gd.Specs {
			if ts, ok := s.(*ast.TypeSpec); ok && ts.Name.Name == name {
				st, _ := ts.Type.(*ast.StructType)
				return st
			}
		}
	}
	return nil
}
