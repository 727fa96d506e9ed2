package sqlfacts

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestOperators(t *testing.T) {
	tests := []struct {
		name string
		sql  string
		want []Operator
	}{
		{"infix", "SELECT 1 + 2", []Operator{{"", "+"}}},
		{"user operator", "SELECT 1 #!# 2", []Operator{{"", "#!#"}}},
		{"qualified", "SELECT 1 OPERATOR(app.#!#) 2", []Operator{{"app", "#!#"}}},
		{"prefix", "SELECT -x FROM t", []Operator{{"", "-"}}},
		{"in list", "SELECT 1 WHERE 1 IN (1, 2)", []Operator{{"", "="}}},
		{"not in list", "SELECT 1 WHERE 1 NOT IN (1, 2)", []Operator{{"", "<>"}}},
		{"in subquery", "SELECT 1 WHERE 1 IN (SELECT 1)", []Operator{{"", "="}}},
		{"any subquery", "SELECT 1 WHERE 1 < ANY (SELECT 1)", []Operator{{"", "<"}}},
		{"any array", "SELECT 1 WHERE 1 = ANY (ARRAY[1])", []Operator{{"", "="}}},
		{"like", "SELECT 1 WHERE 'a' LIKE 'b'", []Operator{{"", "~~"}}},
		{"ilike", "SELECT 1 WHERE 'a' NOT ILIKE 'b'", []Operator{{"", "!~~*"}}},
		{"between", "SELECT 1 WHERE 2 BETWEEN 1 AND 3", []Operator{{"", ">="}, {"", "<="}}},
		{"not between", "SELECT 1 WHERE 2 NOT BETWEEN 1 AND 3", []Operator{{"", "<"}, {"", ">"}}},
		{"distinct", "SELECT 1 WHERE 1 IS DISTINCT FROM 2", []Operator{{"", "="}}},
		{"nullif", "SELECT nullif(1, 2)", []Operator{{"", "="}}},
		{"simple case", "SELECT CASE 1 WHEN 2 THEN 3 END", []Operator{{"", "="}}},
		{"searched case has no implied operator", "SELECT CASE WHEN true THEN 3 END", []Operator{}},
		{"order by using", "SELECT x FROM t ORDER BY x USING ~<~", []Operator{{"", "~<~"}}},
		{"join using", "SELECT * FROM a JOIN b USING (id)", []Operator{{"", "="}}},
		{"natural join", "SELECT * FROM a NATURAL JOIN b", []Operator{{"", "="}}},
		{"join on", "SELECT * FROM a JOIN b ON a.id < b.id", []Operator{{"", "<"}}},
		{"in update", "UPDATE t SET x = x * 2 WHERE id = 1", []Operator{{"", "*"}, {"", "="}}},
		{"none", "SELECT x FROM t", []Operator{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := parseOne(t, tt.sql)
			if !reflect.DeepEqual(st.Operators, tt.want) {
				t.Errorf("Parse(%q).Operators = %v; want %v", tt.sql, st.Operators, tt.want)
			}
		})
	}
}

// testCatalog is a database with a user function app_purge behind the
// operator #!#, a public.lower(int) overload, a user-only function
// app_fmt, and casts to the user type money2.
func testCatalog() *Catalog {
	return NewCatalog(
		[]string{"lower", "upper", "int4pl", "count"},
		[]Function{{"public", "app_purge"}, {"public", "lower"}, {"public", "app_fmt"}, {"other", "upper"}, {"public", "to_money2"}, {"public", "money2_in"}},
		[]CatalogOperator{{Schema: "public", Name: "#!#", Func: Function{"public", "app_purge"}}, {Schema: "other", Name: "+", Func: Function{"other", "evil_add"}}},
		[]CatalogCast{{Target: "money2", Func: Function{"public", "to_money2"}}, {Target: "positive", Func: Function{"public", "is_positive"}}, {Target: "boxed", Func: Function{"public", "is_positive"}}},
		[]CatalogRelation{{Schema: "public", Name: "v_fmt", Func: Function{"public", "app_fmt"}}, {Schema: "public", Name: "guarded", Func: Function{"public", "can_see"}}},
	)
}

func TestCatalogResolve(t *testing.T) {
	tests := []struct {
		name string
		sql  string
		cat  *Catalog
		want []Function
	}{
		{"user operator calls its function", "SELECT 1 #!# 2", testCatalog(), []Function{{"public", "app_purge"}}},
		{"qualified user operator", "SELECT 1 OPERATOR(public.#!#) 2", testCatalog(), []Function{{"public", "app_purge"}}},
		{"operator outside the search path", "SELECT 1 + 2", testCatalog(), []Function{}},
		{"operator qualified with its schema", "SELECT 1 OPERATOR(other.+) 2", testCatalog(), []Function{{"other", "evil_add"}}},
		{"overload of a built-in adds the user function", "SELECT lower(42)", testCatalog(), []Function{{"", "lower"}, {"public", "lower"}}},
		{"user-only function is qualified", "SELECT app_fmt(1)", testCatalog(), []Function{{"public", "app_fmt"}}},
		{"same name outside the search path", "SELECT upper('a')", testCatalog(), []Function{{"", "upper"}}},
		{"built-in only", "SELECT count(*) FROM t", testCatalog(), []Function{{"", "count"}}},
		{"explicit user cast", "SELECT 1::money2", testCatalog(), []Function{{"public", "to_money2"}}},
		{"function-style cast", "SELECT money2(1)", testCatalog(), []Function{{"", "money2"}, {"public", "to_money2"}}},
		{"inner of explain", "EXPLAIN SELECT 1 #!# 2", testCatalog(), []Function{{"public", "app_purge"}}},
		{"view calls a user function", "SELECT * FROM v_fmt", testCatalog(), []Function{{"public", "app_fmt"}}},
		{"row-level security policy", "UPDATE guarded SET a = 1 WHERE b = 2", testCatalog(), []Function{{"public", "can_see"}}},
		{"composite with a checked domain", "SELECT '(5)'::boxed", testCatalog(), []Function{{"public", "is_positive"}}},
		{"populate a composite", "SELECT jsonb_populate_record(NULL::boxed, '{}')", testCatalog(), []Function{{"", "jsonb_populate_record"}, {"public", "is_positive"}}},
		{"column definition list of a domain", "SELECT * FROM jsonb_to_record('{}') AS x(a positive)", testCatalog(), []Function{{"", "jsonb_to_record"}, {"public", "is_positive"}}},
		{"no catalog assumes built-ins", "SELECT lower(42), 1 #!# 2", nil, []Function{{"", "lower"}}},
		{"implicit user cast reaches every query", "SELECT 1", NewCatalog(nil, nil, nil, []CatalogCast{{Target: "t", Func: Function{"public", "conv"}, Implicit: true}}, nil), []Function{{"public", "conv"}}},
		{"implicit user cast and a transaction", "BEGIN", NewCatalog(nil, nil, nil, []CatalogCast{{Target: "t", Func: Function{"public", "conv"}, Implicit: true}}, nil), []Function{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sts, err := Parse(tt.sql, Options{Database: "app", Catalog: tt.cat})
			if err != nil || len(sts) != 1 {
				t.Fatalf("Parse(%q) = %d statements, %v; want 1, nil", tt.sql, len(sts), err)
			}
			if got := sts[0].Functions; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse(%q).Functions = %v; want %v", tt.sql, got, tt.want)
			}
			if in := sts[0].Inner; in != nil && !reflect.DeepEqual(in.Functions, tt.want) {
				t.Errorf("Parse(%q).Inner.Functions = %v; want %v", tt.sql, in.Functions, tt.want)
			}
		})
	}
}

func TestCatalogDigest(t *testing.T) {
	a, b := testCatalog(), testCatalog()
	if a.Digest() != b.Digest() || a.Digest() == "" {
		t.Fatalf("Digest of equal catalogs = %q, %q; want equal and non-empty", a.Digest(), b.Digest())
	}
	c := NewCatalog([]string{"lower"}, []Function{{"public", "app_purge"}}, nil, nil, nil)
	if c.Digest() == a.Digest() {
		t.Errorf("Digest of different catalogs = %q for both; want different", c.Digest())
	}
	if (*Catalog)(nil).Digest() != "" || !(*Catalog)(nil).Empty() {
		t.Errorf("nil catalog: Digest %q, Empty %v; want \"\", true", (*Catalog)(nil).Digest(), (*Catalog)(nil).Empty())
	}
}

// The walker keeps only the casts a user cast targets, so a text of many
// distinct casts does not grow a list it de-duplicates by scanning.
func TestManyDistinctCastsAndOperators(t *testing.T) {
	var b strings.Builder
	b.WriteString("SELECT 1")
	for i := range 5000 {
		fmt.Fprintf(&b, ", CAST(x AS t%d), 1 #%s 1", i, strings.Repeat("@", i%60+1))
	}
	sts, err := Parse(b.String(), Options{Catalog: testCatalog(), Limits: Limits{MaxOps: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	st := sts[0]
	if len(st.casts) != 0 {
		t.Errorf("casts recorded = %d; want 0 (no user cast targets t0…t4999)", len(st.casts))
	}
	if len(st.Operators) != 60 {
		t.Errorf("operators = %d; want 60 distinct", len(st.Operators))
	}
}
