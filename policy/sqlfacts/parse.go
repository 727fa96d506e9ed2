package sqlfacts

import (
	"strings"
	"sync"

	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/egressd/egressd/policy"
)

// Options are the session facts a parse needs.
type Options struct {
	// Database is the session's database, copied into every Statement.
	Database string
	// SearchPath resolves unqualified relation names to its first schema.
	// If empty, "public" is used.
	SearchPath []string
	// Limits bound the text given to the parser.
	Limits Limits
}

// Parse pre-scans sql, parses it with pg_query and returns the facts of
// each statement in order. Every error is a *policy.DenyError with reason
// sql_too_complex, sql_invalid_utf8 or sql_parse_error. An empty query (only
// comments or semicolons) yields no statements.
func Parse(sql string, opt Options) ([]*Statement, error) {
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
		st := classify(raw.Stmt, def)
		st.Database = opt.Database
		st.Text = stmtText(sql, raw)
		out = append(out, st)
	}
	return out, nil
}

// stmtText is the statement's slice of sql. pg_query gives byte offsets; a
// zero length means "to the end".
func stmtText(sql string, raw *pg_query.RawStmt) string {
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
func classify(n *pg_query.Node, defSchema string) *Statement {
	st := &Statement{Command: commandName(n), Relations: []Relation{}, Functions: []Function{}}
	st.DDL = !nonDDL[st.Command]
	w := &walker{st: st, defSchema: defSchema}
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
		st.Set = &Set{Name: strings.ToLower(s.Name), Action: setAction(s.Kind), Local: s.IsLocal}
	case *pg_query.Node_TransactionStmt:
		st.Transaction = strings.ToLower(strings.TrimPrefix(v.TransactionStmt.Kind.String(), "TRANS_STMT_"))
	case *pg_query.Node_ListenStmt:
		st.Channel = v.ListenStmt.Conditionname
	case *pg_query.Node_UnlistenStmt:
		st.Channel = v.UnlistenStmt.Conditionname
	case *pg_query.Node_NotifyStmt:
		st.Channel = v.NotifyStmt.Conditionname
	case *pg_query.Node_ExplainStmt:
		st.ExplainAnalyze = explainAnalyze(v.ExplainStmt.Options)
		st.Inner = classify(v.ExplainStmt.Query, defSchema)
	case *pg_query.Node_PrepareStmt:
		st.Inner = classify(v.PrepareStmt.Query, defSchema)
	case *pg_query.Node_DeclareCursorStmt:
		st.Inner = classify(v.DeclareCursorStmt.Query, defSchema)
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

func setAction(k pg_query.VariableSetKind) string {
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
func explainAnalyze(opts []*pg_query.Node) bool {
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

// nonDDL are the commands that are not schema or server changes. Anything
// else — including a node kind added by a newer parser — is DDL.
var nonDDL = map[string]bool{
	"select": true, "insert": true, "update": true, "delete": true, "merge": true,
	"copy": true, "do": true, "call": true, "execute": true, "prepare": true,
	"deallocate": true, "set": true, "show": true, "transaction": true,
	"listen": true, "unlisten": true, "notify": true, "lock": true, "explain": true,
	"declare_cursor": true, "fetch": true, "close_portal": true, "discard": true,
}

// renames give some commands the names operators know them by.
var renames = map[string]string{
	"variable_set":          "set",
	"variable_show":         "show",
	"create":                "create_table",
	"create_foreign_server": "create_server",
}

var (
	nodeOneof    = (&pg_query.Node{}).ProtoReflect().Descriptor().Oneofs().ByName("node")
	commandNames sync.Map // protoreflect.FullName → string
)

// commandName is the snake_case name of the statement node's type without
// its "Stmt" suffix: SelectStmt → "select", AlterSystemStmt →
// "alter_system".
func commandName(n *pg_query.Node) string {
	fd := n.ProtoReflect().WhichOneof(nodeOneof)
	if fd == nil || fd.Message() == nil {
		return "unknown"
	}
	full := fd.Message().FullName()
	if c, ok := commandNames.Load(full); ok {
		return c.(string)
	}
	name := snake(strings.TrimSuffix(string(fd.Message().Name()), "Stmt"))
	if r, ok := renames[name]; ok {
		name = r
	}
	commandNames.Store(full, name)
	return name
}

func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
