package sqlfacts

import (
	"context"
	"io/fs"
	"reflect"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/egressd/egressd/policy/sqlfacts/analyst"
	defaultbundle "github.com/egressd/egressd/rego"
)

// flagSQL has a statement for every flag, statements near each one that
// must not set it, and statements that set several.
var flagSQL = []struct {
	sql  string
	want []Flag
}{
	{"SELECT 1", nil},
	{"COPY t FROM PROGRAM 'id'", []Flag{FlagCopyProgram, FlagCopyFile}},
	{"COPY t TO '/tmp/x'", []Flag{FlagCopyFile, FlagCopyTableOut}},
	{"COPY t TO STDOUT", []Flag{FlagCopyTableOut}},
	{"COPY t FROM STDIN", nil},
	{"COPY (SELECT * FROM t) TO STDOUT", nil},
	{"COPY (DELETE FROM t RETURNING *) TO STDOUT", []Flag{FlagUnfilteredWrite}},
	{"SELECT nextval(c) FROM t", []Flag{FlagDynamicName}},
	{"SELECT 1 INTO x", []Flag{FlagSelectInto}},
	{"CREATE TABLE x (a int)", []Flag{FlagDDL}},
	{"TRUNCATE t", []Flag{FlagDDL}},
	{"EXPLAIN CREATE TABLE x AS SELECT 1", []Flag{FlagDDL}},
	{"PREPARE TRANSACTION 'x'", []Flag{FlagPreparedTransaction}},
	{"COMMIT PREPARED 'x'", []Flag{FlagPreparedTransaction}},
	{"ROLLBACK PREPARED 'x'", []Flag{FlagPreparedTransaction}},
	{"BEGIN", nil},
	{"EXPLAIN ANALYZE DELETE FROM t WHERE a = 1", []Flag{FlagExplainAnalyzeWrite}},
	{"EXPLAIN ANALYZE SELECT 1", nil},
	{"EXPLAIN DELETE FROM t WHERE a = 1", nil},
	{"WITH d AS (DELETE FROM t WHERE a = 1 RETURNING *) SELECT * FROM d", []Flag{FlagWritableCTE}},
	{"SELECT * FROM t FOR UPDATE", []Flag{FlagLocking}},
	{"UPDATE t SET a = 1", []Flag{FlagUnfilteredWrite}},
	{"DELETE FROM t", []Flag{FlagUnfilteredWrite}},
	{"DELETE FROM t WHERE a = 1", nil},
	{"PREPARE p AS DELETE FROM t", []Flag{FlagUnfilteredWrite}},
	{"MERGE INTO t USING s ON t.a = s.a WHEN MATCHED THEN DELETE", []Flag{FlagUnfilteredWrite}},
	{"SELECT 1 OPERATOR(app.+) 2", []Flag{FlagUserOperator}},
	{"SELECT 1 OPERATOR(pg_catalog.+) 2", nil},
	{"SET ROLE admin", nil},
}

// TestFlagsMatchRego checks Statement.Flags against rego/sql.rego's
// derived_flags, which decides inputs written without flags (the bundle's
// tests): the two must list the same flags, in the same order, for every
// statement of the table above and of the analyst corpus.
func TestFlagsMatchRego(t *testing.T) {
	derived := derivedFlagsQuery(t)
	texts := make([]string, 0, len(flagSQL))
	for _, c := range flagSQL {
		texts = append(texts, c.sql)
	}
	texts = append(texts, analyst.Queries()...)
	for i, text := range texts {
		sts, err := Parse(text, Options{Database: "app"})
		if err != nil {
			t.Fatalf("Parse(%q) = %v; want nil error", text, err)
		}
		for _, st := range sts {
			got := st.Flags()
			if i < len(flagSQL) && !reflect.DeepEqual(got, flagSQL[i].want) {
				t.Errorf("Flags(%q) = %v; want %v", text, got, flagSQL[i].want)
			}
			// The input as a test writes it: the facts without flags.
			in := ast.NewObject(ast.Item(ast.StringTerm("statement"), ast.NewTerm(st.object())))
			rs, err := derived.Eval(context.Background(), rego.EvalParsedInput(in))
			if err != nil || len(rs) != 1 {
				t.Fatalf("derived_flags(%q) = %v, %v; want one result", text, rs, err)
			}
			var want []Flag
			for _, f := range rs[0].Expressions[0].Value.([]any) {
				want = append(want, Flag(f.(string)))
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Flags(%q) = %v; sql.rego's derived_flags = %v", text, got, want)
			}
		}
	}
}

// derivedFlagsQuery prepares data.egress.sql.derived_flags from the
// embedded bundle.
func derivedFlagsQuery(t *testing.T) rego.PreparedEvalQuery {
	t.Helper()
	opts := []func(*rego.Rego){rego.Query("data.egress.sql.derived_flags")}
	for _, name := range []string{"base.rego", "sql.rego"} {
		b, err := fs.ReadFile(defaultbundle.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, rego.Module(name, string(b)))
	}
	pq, err := rego.New(opts...).PrepareForEval(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return pq
}
