package sqlfacts

import (
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/egressd/egressd/policy/sqlfacts/internal/jsontree"
)

// Operators and casts call functions the statement never names: `1 #!# 2`
// runs whatever function the operator #!# was created with, `x::money`
// may run a user-defined cast function. The walker records every operator
// a statement applies (and the types it casts to) so that Catalog.resolve
// can add the functions they can reach.

var (
	keyAExprKind = jsonName(&pg_query.A_Expr{}, "kind")
	keyAExprName = jsonName(&pg_query.A_Expr{}, "name")
	keySubLink   = jsonName(&pg_query.SubLink{}, "sub_link_type")
	keyOperName  = jsonName(&pg_query.SubLink{}, "oper_name")
	keyUseOp     = jsonName(&pg_query.SortBy{}, "use_op")
	keyCaseArg   = jsonName(&pg_query.CaseExpr{}, "arg")
	keyNatural   = jsonName(&pg_query.JoinExpr{}, "is_natural")
	keyUsing     = jsonName(&pg_query.JoinExpr{}, "using_clause")

	typeAExpr    = string((&pg_query.A_Expr{}).ProtoReflect().Descriptor().Name())
	typeSubLink  = string((&pg_query.SubLink{}).ProtoReflect().Descriptor().Name())
	typeSortBy   = string((&pg_query.SortBy{}).ProtoReflect().Descriptor().Name())
	typeCaseExpr = string((&pg_query.CaseExpr{}).ProtoReflect().Descriptor().Name())
	typeJoinExpr = string((&pg_query.JoinExpr{}).ProtoReflect().Descriptor().Name())

	// impliedOps are the operators of the A_Expr kinds whose name field
	// is not the operator the server applies.
	impliedOps = map[string][]string{
		pg_query.A_Expr_Kind_AEXPR_BETWEEN.String():         {">=", "<="},
		pg_query.A_Expr_Kind_AEXPR_BETWEEN_SYM.String():     {">=", "<="},
		pg_query.A_Expr_Kind_AEXPR_NOT_BETWEEN.String():     {"<", ">"},
		pg_query.A_Expr_Kind_AEXPR_NOT_BETWEEN_SYM.String(): {"<", ">"},
	}
	anySubLink = pg_query.SubLinkType_ANY_SUBLINK.String()
)

// operators records the operators (or cast type) of the A_Expr, SubLink,
// SortBy, JoinExpr or CaseExpr object v.
func (w *walker) operators(mi *msgInfo, v int32) {
	d := w.d
	switch mi.typeName {
	case typeAExpr:
		if ops, ok := impliedOps[d.Str(d.Get(v, keyAExprKind))]; ok {
			for _, op := range ops {
				w.operator("", op)
			}
			return
		}
		w.operator(listName(d, d.Get(v, keyAExprName)))
	case typeSubLink:
		names := d.Get(v, keyOperName)
		if !d.NonEmpty(names) {
			// `x IN (SELECT …)` is an ANY sublink whose = the analyzer
			// supplies.
			if d.Str(d.Get(v, keySubLink)) == anySubLink {
				w.operator("", "=")
			}
			return
		}
		w.operator(listName(d, names))
	case typeSortBy:
		w.operator(listName(d, d.Get(v, keyUseOp)))
	case typeJoinExpr:
		// JOIN … USING and NATURAL JOIN compare the columns with =.
		if d.Truthy(d.Get(v, keyNatural)) || d.NonEmpty(d.Get(v, keyUsing)) {
			w.operator("", "=")
		}
	case typeCaseExpr:
		// CASE x WHEN y compares x = y.
		if d.Present(d.Get(v, keyCaseArg)) {
			w.operator("", "=")
		}
	}
}

// operator records one operator; an empty name is none. Statements apply
// few distinct operators and a scan finds them fastest; past
// operatorScanMax a map keeps the walk linear in the text.
func (w *walker) operator(schema, name string) {
	if name == "" {
		return
	}
	op := Operator{Schema: schema, Name: name}
	if w.seenOps != nil {
		if w.seenOps[op] {
			return
		}
	} else {
		for _, x := range w.st.Operators {
			if x == op {
				return
			}
		}
	}
	if schema != "" {
		op.Schema = strings.Clone(schema)
	}
	op.Name = internOp(name)
	w.st.Operators = append(w.st.Operators, op)
	if w.seenOps != nil {
		w.seenOps[op] = true
	} else if len(w.st.Operators) > operatorScanMax {
		w.seenOps = make(map[Operator]bool, 2*len(w.st.Operators))
		for _, x := range w.st.Operators {
			w.seenOps[x] = true
		}
	}
}

const operatorScanMax = 16

// internOp is name, a constant for the common operators: facts must not
// pin the JSON document, and a clone per operator showed in allocation
// counts.
func internOp(name string) string {
	switch name {
	case "=":
		return "="
	case "<>":
		return "<>"
	case "<":
		return "<"
	case ">":
		return ">"
	case "<=":
		return "<="
	case ">=":
		return ">="
	case "+":
		return "+"
	case "-":
		return "-"
	case "*":
		return "*"
	case "/":
		return "/"
	case "%":
		return "%"
	case "||":
		return "||"
	case "~~":
		return "~~"
	case "~~*":
		return "~~*"
	case "->":
		return "->"
	case "->>":
		return "->>"
	}
	return strings.Clone(name)
}

// listName is the [[catalog.]schema.]name of a list of String nodes.
func listName(d *jsontree.Doc, names int32) (schema, name string) {
	schema, name, _ = lastTwo(d, names)
	return schema, name
}
