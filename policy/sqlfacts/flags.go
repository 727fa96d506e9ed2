package sqlfacts

import "github.com/open-policy-agent/opa/v1/ast"

// Flag names the statement facts egress.sql refuses on
// (input.statement.flags). Go computes them with the other facts so that
// rego/sql.rego looks each check up in one short list instead of walking
// every branch of its else-chains for every statement; sql.rego's
// derived_flags computes the same list from the other facts for an input
// written without it (TestFlagsMatchRego checks that the two agree).
type Flag string

// The flags, in the order input.statement.flags lists them: the order in
// which the policy weighs them.
const (
	FlagCopyProgram         Flag = "copy_program"          // COPY … PROGRAM
	FlagCopyFile            Flag = "copy_file"             // COPY to or from a server file
	FlagDynamicName         Flag = "dynamic_name"          // Statement.DynamicName
	FlagSelectInto          Flag = "select_into"           // the statement that runs is SELECT … INTO
	FlagDDL                 Flag = "ddl"                   // the statement or the one it wraps is DDL
	FlagPreparedTransaction Flag = "prepared_transaction"  // PREPARE TRANSACTION, COMMIT/ROLLBACK PREPARED
	FlagExplainAnalyzeWrite Flag = "explain_analyze_write" // EXPLAIN ANALYZE of anything but a SELECT
	FlagWritableCTE         Flag = "writable_cte"          // Statement.WritableCTE
	FlagLocking             Flag = "locking"               // Statement.Locking
	FlagCopyTableOut        Flag = "copy_table_out"        // COPY table TO
	FlagUnfilteredWrite     Flag = "unfiltered_write"      // see unfiltered
	FlagUserOperator        Flag = "user_operator"         // an operator qualified outside pg_catalog
)

// flagTerms are the flags as Rego strings, built once.
var flagTerms = func() map[Flag]*ast.Term {
	m := map[Flag]*ast.Term{}
	for _, f := range []Flag{FlagCopyProgram, FlagCopyFile, FlagDynamicName, FlagSelectInto, FlagDDL,
		FlagPreparedTransaction, FlagExplainAnalyzeWrite, FlagWritableCTE, FlagLocking, FlagCopyTableOut,
		FlagUnfilteredWrite, FlagUserOperator} {
		m[f] = ast.StringTerm(string(f))
	}
	return m
}()

// Flags returns the flags of s, in order. eff is what sql.rego calls the
// statement that runs: s.Inner when s wraps one, else s.
func (s *Statement) Flags() []Flag {
	eff := s
	if s.Inner != nil {
		eff = s.Inner
	}
	c := s.Copy
	if c == nil {
		c = &Copy{}
	}
	var out []Flag
	add := func(on bool, f Flag) {
		if on {
			out = append(out, f)
		}
	}
	add(c.Program, FlagCopyProgram)
	add(c.File, FlagCopyFile)
	add(s.DynamicName, FlagDynamicName)
	add(eff.SelectInto, FlagSelectInto)
	add(s.DDL || eff.DDL, FlagDDL)
	add(s.Transaction == "prepare" || s.Transaction == "commit_prepared" || s.Transaction == "rollback_prepared", FlagPreparedTransaction)
	add(s.ExplainAnalyze && eff.Command != "select", FlagExplainAnalyzeWrite)
	add(s.WritableCTE, FlagWritableCTE)
	add(s.Locking, FlagLocking)
	add(c.Table && c.Direction == "to", FlagCopyTableOut)
	add(unfiltered(s) || unfiltered(eff), FlagUnfilteredWrite)
	add(userOperator(s.Operators), FlagUserOperator)
	return out
}

// unfiltered: an UPDATE or DELETE anywhere in s without WHERE (or a MERGE
// or upsert that Statement.MissingWhere describes).
func unfiltered(s *Statement) bool {
	return s.MissingWhere || ((s.Command == "update" || s.Command == "delete") && !s.HasWhere)
}

func userOperator(ops []Operator) bool {
	for _, o := range ops {
		if o.Schema != "" && o.Schema != "pg_catalog" {
			return true
		}
	}
	return false
}

func (s *Statement) flagsTerm() *ast.Term {
	fs := s.Flags()
	ts := make([]*ast.Term, len(fs))
	for i, f := range fs {
		ts[i] = flagTerms[f]
	}
	return ast.ArrayTerm(ts...)
}
