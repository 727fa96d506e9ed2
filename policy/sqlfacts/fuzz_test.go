package sqlfacts

import (
	"errors"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/egressd/egressd/policy"
)

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"SELECT 1", "WITH t AS (DELETE FROM a RETURNING *) SELECT * FROM t",
		"COPY t FROM PROGRAM 'x'", "SELECT $a$ ( $a$", "SET ROLE x; BEGIN; END",
		"SELECT E'\\'' || (1+2)::text", "/* /* */ */ SELECT 1", "EXPLAIN ANALYZE UPDATE t SET a=1",
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
			st.AppendKey(nil)
			st.AddTo(ast.NewObject())
		}
	})
}
