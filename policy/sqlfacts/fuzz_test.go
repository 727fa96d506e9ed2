package sqlfacts

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/egressd/egressd/policy"
)

// FuzzParse checks that every refusal is a *policy.DenyError, and that the
// facts are a fixed point of the split: each statement's own Text, parsed
// alone, is one statement with the same facts (its AppendKey, which
// encodes all of them), so a statement means the same whatever shares its
// query text.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"SELECT 1", "WITH t AS (DELETE FROM a RETURNING *) SELECT * FROM t",
		"COPY t FROM PROGRAM 'x'", "SELECT $a$ ( $a$", "SET ROLE x; BEGIN; END",
		"SELECT E'\\'' || (1+2)::text", "/* /* */ */ SELECT 1", "EXPLAIN ANALYZE UPDATE t SET a=1",
		"SELECT 'a.\"B\"'::regclass, nextval('s'::regclass), NULL::pg_authid, 'int[]'::regtype",
		"SET statement_timeout = -5; SET work_mem = '64MB'; SHOW ALL",
		"COPY (WITH t AS (SELECT 1) DELETE FROM t RETURNING *) TO STDOUT",
		"MERGE INTO o USING s ON true WHEN MATCHED THEN UPDATE SET a = 1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		sts, err := Parse(sql, Options{Database: "d"})
		if err != nil {
			var de *policy.DenyError
			if !errors.As(err, &de) {
				t.Fatalf("Parse error %v is not a *policy.DenyError", err)
			}
			return
		}
		for _, st := range sts {
			st.AddTo(ast.NewObject())
			alone, err := Parse(st.Text, Options{Database: "d"})
			if err != nil || len(alone) != 1 {
				t.Fatalf("Parse(%q) has statement %q; alone it parses to %d statements, %v; want 1", sql, st.Text, len(alone), err)
			}
			if got, want := alone[0].AppendKey(nil), st.AppendKey(nil); !bytes.Equal(got, want) {
				t.Fatalf("Parse(%q) has statement %q with facts %+v; alone its facts are %+v", sql, st.Text, st, alone[0])
			}
		}
	})
}

// FuzzQualifiedName checks qualifiedName against its own inverse: the
// parts it returns, each double-quoted, parse back to the same parts.
func FuzzQualifiedName(f *testing.F) {
	for _, s := range []string{"a", " A . b ", `"a""b".c`, "a..b", `"x`, "d.s.t", strings.Repeat("é", 40)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		parts, ok := qualifiedName(s)
		if !ok {
			return
		}
		quoted := make([]string, len(parts))
		for i, p := range parts {
			if p == "" || len(p) > maxIdentLen {
				t.Fatalf("qualifiedName(%q) part %q; want 1 to %d bytes", s, p, maxIdentLen)
			}
			quoted[i] = `"` + strings.ReplaceAll(p, `"`, `""`) + `"`
		}
		again, ok := qualifiedName(strings.Join(quoted, "."))
		if !ok || !reflect.DeepEqual(again, parts) {
			t.Fatalf("qualifiedName(%q) = %q, but its quoted form parses to %q, %v", s, parts, again, ok)
		}
	})
}

// FuzzQuantity checks that a value read as a quantity is a finite,
// non-negative number that starts the value, as PostgreSQL reads it.
func FuzzQuantity(f *testing.F) {
	for _, s := range []string{"5", "5s", " 1.5 min ", "0x10", "-1", "1e3", ".5ms", "64MB", "5 S"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, units := range []map[string]float64{timeUnits, memoryUnits} {
			n, ok := quantity(s, units)
			if !ok {
				continue
			}
			if *n < 0 || math.IsInf(*n, 0) || math.IsNaN(*n) {
				t.Fatalf("quantity(%q) = %v; want a finite non-negative number", s, *n)
			}
			if c := strings.TrimLeft(s, " \t\n\r\f\v"); c == "" || !(c[0] >= '0' && c[0] <= '9' || c[0] == '.') {
				t.Fatalf("quantity(%q) = %v; want no number from a value not starting with one", s, *n)
			}
		}
	})
}
