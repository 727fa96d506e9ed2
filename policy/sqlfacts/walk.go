package sqlfacts

import (
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// walker collects relations and functions from every node of one
// statement. It walks the protobuf tree generically so that a node kind the
// code does not name (a new expression form, a clause of a DDL statement) is
// still searched for RangeVar and FuncCall; only the nodes whose meaning
// depends on their position (DML targets, WITH scopes) are handled by name.
type walker struct {
	st        *Statement
	defSchema string
	// ctes is the stack of CTE names visible at the current node: an
	// unqualified name that matches one is not a table.
	ctes []string
}

func (w *walker) visibleCTE(name string) bool {
	for i := len(w.ctes) - 1; i >= 0; i-- {
		if w.ctes[i] == name {
			return true
		}
	}
	return false
}

func (w *walker) relation(rv *pg_query.RangeVar, role string) {
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

func (w *walker) function(names []*pg_query.Node) {
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
func (w *walker) with(wc *pg_query.WithClause) {
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

func (w *walker) node(n *pg_query.Node) {
	if n != nil {
		w.msg(n.ProtoReflect())
	}
}

// msg handles the position-dependent nodes and walks every other message
// generically.
func (w *walker) msg(m protoreflect.Message) {
	if _, ok := m.Interface().(*pg_query.Node); ok {
		// Node is a oneof of ~250 messages; Range would test each.
		if fd := m.WhichOneof(nodeOneof); fd != nil {
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
func (w *walker) fields(m protoreflect.Message, skip ...string) {
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
