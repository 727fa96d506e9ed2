package sqlfacts

// Temporary: the protobuf implementation, for the differential test.

import (
	"google.golang.org/protobuf/reflect/protoreflect"
	"strings"
	"sync"

	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/egressd/egressd/policy"
)

// Parse pre-scans sql, parses it with pg_query and returns the facts of
// each statement in order. Every error is a *policy.DenyError with reason
// sql_too_complex, sql_invalid_utf8 or sql_parse_error. An empty query (only
// comments or semicolons) yields no statements.
func oldParse(sql string, opt Options) ([]*Statement, error) {
	if err := Prescan(sql, opt.Limits); err != nil {
		return nil, err
	}
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return nil, &policy.DenyError{Reason: ReasonParseError, Err: err}
	}
	def := "public"
	if len(opt.SearchPath) > 0 {
		def = opt.SearchPath[0]
	}
	out := make([]*Statement, 0, len(tree.Stmts))
	for _, raw := range tree.Stmts {
		st := oldClassify(raw.Stmt, def)
		st.Database = opt.Database
		st.Text = oldStmtText(sql, raw)
		out = append(out, st)
	}
	return out, nil
}

// stmtText is the statement's slice of sql. pg_query gives byte offsets; a
// zero length means "to the end".
func oldStmtText(sql string, raw *pg_query.RawStmt) string {
	start, end := int(raw.StmtLocation), len(sql)
	if raw.StmtLen > 0 {
		end = start + int(raw.StmtLen)
	}
	if start < 0 || start > end || end > len(sql) {
		return sql
	}
	return strings.TrimSpace(sql[start:end])
}

// classify builds the facts of one statement node.
func oldClassify(n *pg_query.Node, defSchema string) *Statement {
	st := &Statement{Command: oldCommandName(n), Relations: []Relation{}, Functions: []Function{}}
	st.DDL = !nonDDL[st.Command]
	w := &oldWalker{st: st, defSchema: defSchema}
	switch v := n.GetNode().(type) {
	case *pg_query.Node_UpdateStmt:
		st.HasWhere = v.UpdateStmt.WhereClause != nil
	case *pg_query.Node_DeleteStmt:
		st.HasWhere = v.DeleteStmt.WhereClause != nil
	case *pg_query.Node_CopyStmt:
		c := v.CopyStmt
		st.Copy = &Copy{Direction: "to", Program: c.IsProgram, File: c.Filename != "" || c.IsProgram, Table: c.Relation != nil}
		if c.IsFrom {
			st.Copy.Direction = "from"
		}
	case *pg_query.Node_VariableSetStmt:
		s := v.VariableSetStmt
		st.Set = &Set{Name: strings.ToLower(s.Name), Action: oldSetAction(s.Kind), Local: s.IsLocal}
	case *pg_query.Node_TransactionStmt:
		st.Transaction = strings.ToLower(strings.TrimPrefix(v.TransactionStmt.Kind.String(), "TRANS_STMT_"))
	case *pg_query.Node_ListenStmt:
		st.Channel = v.ListenStmt.Conditionname
	case *pg_query.Node_UnlistenStmt:
		st.Channel = v.UnlistenStmt.Conditionname
	case *pg_query.Node_NotifyStmt:
		st.Channel = v.NotifyStmt.Conditionname
	case *pg_query.Node_ExplainStmt:
		st.ExplainAnalyze = oldExplainAnalyze(v.ExplainStmt.Options)
		st.Inner = oldClassify(v.ExplainStmt.Query, defSchema)
	case *pg_query.Node_PrepareStmt:
		st.Inner = oldClassify(v.PrepareStmt.Query, defSchema)
	case *pg_query.Node_DeclareCursorStmt:
		st.Inner = oldClassify(v.DeclareCursorStmt.Query, defSchema)
	}
	w.node(n)
	if st.Inner != nil {
		// The wrapper's own lists are the union, so a rule that looks only
		// at the outer statement still sees every relation and function.
		st.WritableCTE = st.WritableCTE || st.Inner.WritableCTE
		st.Locking = st.Locking || st.Inner.Locking
		st.SelectInto = st.SelectInto || st.Inner.SelectInto
	}
	return st
}

func oldSetAction(k pg_query.VariableSetKind) string {
	switch k {
	case pg_query.VariableSetKind_VAR_SET_VALUE:
		return "set"
	case pg_query.VariableSetKind_VAR_SET_DEFAULT:
		return "set_default"
	case pg_query.VariableSetKind_VAR_SET_CURRENT:
		return "set_current"
	case pg_query.VariableSetKind_VAR_SET_MULTI:
		return "set_multi"
	case pg_query.VariableSetKind_VAR_RESET:
		return "reset"
	case pg_query.VariableSetKind_VAR_RESET_ALL:
		return "reset_all"
	}
	return "unknown"
}

// explainAnalyze reports whether EXPLAIN's options turn ANALYZE on: the old
// syntax `EXPLAIN ANALYZE` and `(ANALYZE)` carry no argument, `(ANALYZE
// false)` turns it off.
func oldExplainAnalyze(opts []*pg_query.Node) bool {
	on := false
	for _, o := range opts {
		d := o.GetDefElem()
		if d == nil || !strings.EqualFold(d.Defname, "analyze") {
			continue
		}
		switch a := d.Arg.GetNode().(type) {
		case nil:
			on = true
		case *pg_query.Node_Boolean:
			on = a.Boolean.Boolval
		case *pg_query.Node_String_:
			switch strings.ToLower(a.String_.Sval) {
			case "false", "off", "no", "0":
				on = false
			default:
				on = true
			}
		case *pg_query.Node_Integer:
			on = a.Integer.Ival != 0
		default:
			on = true
		}
	}
	return on
}

var (
	oldNodeOneof    = (&pg_query.Node{}).ProtoReflect().Descriptor().Oneofs().ByName("node")
	oldCommandNames sync.Map // protoreflect.FullName → string
)

// commandName is the snake_case name of the statement node's type without
// its "Stmt" suffix: SelectStmt → "select", AlterSystemStmt →
// "alter_system".
func oldCommandName(n *pg_query.Node) string {
	fd := n.ProtoReflect().WhichOneof(oldNodeOneof)
	if fd == nil || fd.Message() == nil {
		return "unknown"
	}
	full := fd.Message().FullName()
	if c, ok := oldCommandNames.Load(full); ok {
		return c.(string)
	}
	name := snake(strings.TrimSuffix(string(fd.Message().Name()), "Stmt"))
	if r, ok := renames[name]; ok {
		name = r
	}
	oldCommandNames.Store(full, name)
	return name
}

// oldWalker collects relations and functions from every node of one
// statement. It walks the protobuf tree generically so that a node kind the
// code does not name (a new expression form, a clause of a DDL statement) is
// still searched for RangeVar and FuncCall; only the nodes whose meaning
// depends on their position (DML targets, WITH scopes) are handled by name.
type oldWalker struct {
	st        *Statement
	defSchema string
	// ctes is the stack of CTE names visible at the current node: an
	// unqualified name that matches one is not a table.
	ctes []string
}

func (w *oldWalker) visibleCTE(name string) bool {
	for i := len(w.ctes) - 1; i >= 0; i-- {
		if w.ctes[i] == name {
			return true
		}
	}
	return false
}

func (w *oldWalker) relation(rv *pg_query.RangeVar, role string) {
	if rv == nil {
		return
	}
	if rv.Schemaname == "" && w.visibleCTE(rv.Relname) {
		return
	}
	r := Relation{Schema: rv.Schemaname, Name: rv.Relname, Role: role}
	if r.Schema == "" {
		if strings.HasPrefix(r.Name, "pg_") {
			r.Schema = "pg_catalog"
		} else {
			r.Schema = w.defSchema
		}
	}
	// Statements name few relations: a scan beats a map.
	for _, x := range w.st.Relations {
		if x == r {
			return
		}
	}
	w.st.Relations = append(w.st.Relations, r)
}

func (w *oldWalker) function(names []*pg_query.Node) {
	var f Function
	switch len(names) {
	case 0:
		return
	case 1:
		f.Name = names[0].GetString_().GetSval()
	default:
		f.Schema = names[len(names)-2].GetString_().GetSval()
		f.Name = names[len(names)-1].GetString_().GetSval()
	}
	for _, x := range w.st.Functions {
		if x == f {
			return
		}
	}
	w.st.Functions = append(w.st.Functions, f)
}

// with walks a WITH clause and leaves its names visible; the caller pops
// them with w.ctes = w.ctes[:mark]. A non-recursive CTE sees only the CTEs
// before it: `WITH t AS (SELECT * FROM t)` reads the table t.
func (w *oldWalker) with(wc *pg_query.WithClause) {
	if wc == nil {
		return
	}
	if wc.Recursive {
		for _, n := range wc.Ctes {
			w.ctes = append(w.ctes, n.GetCommonTableExpr().GetCtename())
		}
	}
	for _, n := range wc.Ctes {
		cte := n.GetCommonTableExpr()
		if cte == nil {
			continue
		}
		switch cte.Ctequery.GetNode().(type) {
		case *pg_query.Node_InsertStmt, *pg_query.Node_UpdateStmt, *pg_query.Node_DeleteStmt, *pg_query.Node_MergeStmt:
			w.st.WritableCTE = true
		}
		w.node(cte.Ctequery)
		if !wc.Recursive {
			w.ctes = append(w.ctes, cte.Ctename)
		}
	}
}

func (w *oldWalker) node(n *pg_query.Node) {
	if n != nil {
		w.msg(n.ProtoReflect())
	}
}

// msg handles the position-dependent nodes and walks every other message
// generically.
func (w *oldWalker) msg(m protoreflect.Message) {
	if _, ok := m.Interface().(*pg_query.Node); ok {
		// Node is a oneof of ~250 messages; Range would test each.
		if fd := m.WhichOneof(oldNodeOneof); fd != nil {
			w.msg(m.Get(fd).Message())
		}
		return
	}
	mark := len(w.ctes)
	defer func() { w.ctes = w.ctes[:mark] }()
	switch v := m.Interface().(type) {
	case *pg_query.A_Const, *pg_query.ParamRef, *pg_query.ColumnRef, *pg_query.String, *pg_query.Integer,
		*pg_query.Float, *pg_query.Boolean, *pg_query.BitString, *pg_query.A_Star:
		// Leaves (a ColumnRef holds only Strings and A_Star): the most
		// common nodes, and reflecting over their fields is the walk's
		// main cost.
		return
	case *pg_query.RangeVar:
		w.relation(v, RoleRead)
		return
	case *pg_query.FuncCall:
		w.function(v.Funcname)
	case *pg_query.SelectStmt:
		w.with(v.WithClause)
		if len(v.LockingClause) > 0 {
			w.st.Locking = true
		}
		if v.IntoClause != nil {
			w.st.SelectInto = true
			w.relation(v.IntoClause.Rel, RoleWrite)
		}
		w.fields(m, "with_clause", "into_clause")
		return
	case *pg_query.InsertStmt:
		w.with(v.WithClause)
		w.relation(v.Relation, RoleWrite)
		w.fields(m, "with_clause", "relation")
		return
	case *pg_query.UpdateStmt:
		w.with(v.WithClause)
		w.relation(v.Relation, RoleWrite)
		w.fields(m, "with_clause", "relation")
		return
	case *pg_query.DeleteStmt:
		w.with(v.WithClause)
		w.relation(v.Relation, RoleWrite)
		w.fields(m, "with_clause", "relation")
		return
	case *pg_query.MergeStmt:
		w.with(v.WithClause)
		w.relation(v.Relation, RoleWrite)
		w.fields(m, "with_clause", "relation")
		return
	case *pg_query.CopyStmt:
		role := RoleRead
		if v.IsFrom {
			role = RoleWrite
		}
		w.relation(v.Relation, role)
		w.fields(m, "relation")
		return
	case *pg_query.LockStmt:
		for _, r := range v.Relations {
			w.relation(r.GetRangeVar(), RoleWrite)
		}
		return
	case *pg_query.TruncateStmt:
		for _, r := range v.Relations {
			w.relation(r.GetRangeVar(), RoleWrite)
		}
		return
	}
	w.fields(m)
}

// fields walks every set message field of m except those named in skip.
func (w *oldWalker) fields(m protoreflect.Message, skip ...string) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind {
			return true
		}
		for _, s := range skip {
			if string(fd.Name()) == s {
				return true
			}
		}
		if fd.IsList() {
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				w.msg(l.Get(i).Message())
			}
			return true
		}
		if fd.IsMap() {
			return true
		}
		w.msg(v.Message())
		return true
	})
}
