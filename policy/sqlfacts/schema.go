package sqlfacts

import (
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// pg_query's JSON parse tree is its protobuf tree in protobuf's JSON
// mapping: keys are the fields' JSON names, a Node is an object with one
// key (the JSON name of its oneof member, which is the node type name),
// a field typed as a concrete message is not wrapped, and default values
// are omitted. The walker reads it with the protobuf descriptors in hand,
// prepared here once: for every message, its fields by JSON name and
// whether each leads to a message.

// msgKind says how the walker treats a message: most are walked field by
// field; the rest depend on their position or are known to hold nothing.
type msgKind uint8

const (
	kindGeneric msgKind = iota
	kindNode            // the Node oneof: one key, the member's type
	kindLeaf            // holds no relation or function
	kindRangeVar
	kindFuncCall
	kindSelect
	kindInsert      // INSERT: relation is the target
	kindFilteredDML // UPDATE, DELETE: relation is the target, WHERE filters
	kindMerge       // MERGE: relation is the target, WHEN clauses filter
	kindCopy
	kindLockTarget // LOCK, TRUNCATE: relations are targets
	kindTypeName   // a type, which may be a relation's row type
	kindTypeCast   // a cast, which to a reg* type names a relation or function
	kindOperators  // A_Expr, SubLink, SortBy, JoinExpr, CaseExpr: see operators.go
)

type msgInfo struct {
	kind msgKind
	// command is the statement's command name, for Node members.
	command string
	// typeName is the message name ("SelectStmt").
	typeName string
	fields   map[string]fieldInfo
}

type fieldInfo struct {
	// msg is the field's message type; nil for scalars and enums.
	msg  *msgInfo
	list bool
}

var (
	nodeInfo = buildInfo((&pg_query.Node{}).ProtoReflect().Descriptor(), map[protoreflect.FullName]*msgInfo{})

	kindByMessage = messageKinds()

	// The JSON keys the walker reads by name, taken from the descriptors
	// so that a renamed field fails at init, not silently.
	keyStmt         = jsonName(&pg_query.RawStmt{}, "stmt")
	keyStmtLocation = jsonName(&pg_query.RawStmt{}, "stmt_location")
	keyStmtLen      = jsonName(&pg_query.RawStmt{}, "stmt_len")
	keyStmts        = jsonName(&pg_query.ParseResult{}, "stmts")
	keyWithClause   = jsonName(&pg_query.SelectStmt{}, "with_clause")
	keyIntoClause   = jsonName(&pg_query.SelectStmt{}, "into_clause")
	keyLocking      = jsonName(&pg_query.SelectStmt{}, "locking_clause")
	keyIntoRel      = jsonName(&pg_query.IntoClause{}, "rel")
	keyRelation     = jsonName(&pg_query.InsertStmt{}, "relation")
	keyRelations    = jsonName(&pg_query.LockStmt{}, "relations")
	keyWhere        = jsonName(&pg_query.UpdateStmt{}, "where_clause")
	keyIsFrom       = jsonName(&pg_query.CopyStmt{}, "is_from")
	keyIsProgram    = jsonName(&pg_query.CopyStmt{}, "is_program")
	keyFilename     = jsonName(&pg_query.CopyStmt{}, "filename")
	keySetKind      = jsonName(&pg_query.VariableSetStmt{}, "kind")
	keySetName      = jsonName(&pg_query.VariableSetStmt{}, "name")
	keyIsLocal      = jsonName(&pg_query.VariableSetStmt{}, "is_local")
	keyTransKind    = jsonName(&pg_query.TransactionStmt{}, "kind")
	keyCondition    = jsonName(&pg_query.ListenStmt{}, "conditionname")
	keyOptions      = jsonName(&pg_query.ExplainStmt{}, "options")
	keyQuery        = jsonName(&pg_query.ExplainStmt{}, "query")
	keyCopyQuery    = jsonName(&pg_query.CopyStmt{}, "query")
	keyRecursive    = jsonName(&pg_query.WithClause{}, "recursive")
	keyCtes         = jsonName(&pg_query.WithClause{}, "ctes")
	keyCtename      = jsonName(&pg_query.CommonTableExpr{}, "ctename")
	keyCtequery     = jsonName(&pg_query.CommonTableExpr{}, "ctequery")
	keySchemaname   = jsonName(&pg_query.RangeVar{}, "schemaname")
	keyRelname      = jsonName(&pg_query.RangeVar{}, "relname")
	keyFuncname     = jsonName(&pg_query.FuncCall{}, "funcname")
	keySval         = jsonName(&pg_query.String{}, "sval")
	keyIval         = jsonName(&pg_query.Integer{}, "ival")
	keyBoolval      = jsonName(&pg_query.Boolean{}, "boolval")
	keyDefname      = jsonName(&pg_query.DefElem{}, "defname")
	keyArg          = jsonName(&pg_query.DefElem{}, "arg")
	keyCastArg      = jsonName(&pg_query.TypeCast{}, "arg")
	keyTypeName     = jsonName(&pg_query.TypeCast{}, "type_name")
	keyNames        = jsonName(&pg_query.TypeName{}, "names")
	keyTypmods      = jsonName(&pg_query.TypeName{}, "typmods")
	keyArrayBounds  = jsonName(&pg_query.TypeName{}, "array_bounds")
	keyArgs         = jsonName(&pg_query.FuncCall{}, "args")
	keySetArgs      = jsonName(&pg_query.VariableSetStmt{}, "args")
	keyMergeWhen    = jsonName(&pg_query.MergeStmt{}, "merge_when_clauses")
	keyMatched      = jsonName(&pg_query.MergeWhenClause{}, "matched")
	keyCommandType  = jsonName(&pg_query.MergeWhenClause{}, "command_type")
	keyMergeCond    = jsonName(&pg_query.MergeWhenClause{}, "condition")
	keyShowName     = jsonName(&pg_query.VariableShowStmt{}, "name")
	keyOnConflict   = jsonName(&pg_query.InsertStmt{}, "on_conflict_clause")
	keyInsertSelect = jsonName(&pg_query.InsertStmt{}, "select_stmt")
	keyConflictAct  = jsonName(&pg_query.OnConflictClause{}, "action")
	keyConflictWhr  = jsonName(&pg_query.OnConflictClause{}, "where_clause")
	keyValuesLists  = jsonName(&pg_query.SelectStmt{}, "values_lists")
	keyIsnull       = jsonName(&pg_query.A_Const{}, "isnull")
	keyConstSval    = jsonName(&pg_query.A_Const{}, "sval")
	keyConstIval    = jsonName(&pg_query.A_Const{}, "ival")
	keyConstFval    = jsonName(&pg_query.A_Const{}, "fval")
	keyConstBool    = jsonName(&pg_query.A_Const{}, "boolval")
	keyFval         = jsonName(&pg_query.Float{}, "fval")

	// Node member keys ("SelectStmt", "String", …).
	nodeString          = nodeKey(&pg_query.String{})
	nodeInteger         = nodeKey(&pg_query.Integer{})
	nodeBoolean         = nodeKey(&pg_query.Boolean{})
	nodeDefElem         = nodeKey(&pg_query.DefElem{})
	nodeRangeVar        = nodeKey(&pg_query.RangeVar{})
	nodeCommonTableExpr = nodeKey(&pg_query.CommonTableExpr{})
	nodeSelectStmt      = nodeKey(&pg_query.SelectStmt{})
	nodeInsertStmt      = nodeKey(&pg_query.InsertStmt{})
	nodeUpdateStmt      = nodeKey(&pg_query.UpdateStmt{})
	nodeDeleteStmt      = nodeKey(&pg_query.DeleteStmt{})
	nodeMergeStmt       = nodeKey(&pg_query.MergeStmt{})
	nodeCopyStmt        = nodeKey(&pg_query.CopyStmt{})
	nodeVariableSetStmt = nodeKey(&pg_query.VariableSetStmt{})
	nodeTransactionStmt = nodeKey(&pg_query.TransactionStmt{})
	nodeListenStmt      = nodeKey(&pg_query.ListenStmt{})
	nodeUnlistenStmt    = nodeKey(&pg_query.UnlistenStmt{})
	nodeNotifyStmt      = nodeKey(&pg_query.NotifyStmt{})
	nodeExplainStmt     = nodeKey(&pg_query.ExplainStmt{})
	nodePrepareStmt     = nodeKey(&pg_query.PrepareStmt{})
	nodeDeclareCursor   = nodeKey(&pg_query.DeclareCursorStmt{})
	nodeVariableShow    = nodeKey(&pg_query.VariableShowStmt{})
	nodeAConst          = nodeKey(&pg_query.A_Const{})
	nodeTypeCast        = nodeKey(&pg_query.TypeCast{})
	nodeMergeWhenClause = nodeKey(&pg_query.MergeWhenClause{})

	conflictUpdate = pg_query.OnConflictAction_ONCONFLICT_UPDATE.String()
	cmdUpdate      = pg_query.CmdType_CMD_UPDATE.String()
	cmdDelete      = pg_query.CmdType_CMD_DELETE.String()

	// setActions and transactionKinds map enum value names (as the JSON
	// writes them) to the facts' words.
	setActions = map[string]string{
		pg_query.VariableSetKind_VAR_SET_VALUE.String():   "set",
		pg_query.VariableSetKind_VAR_SET_DEFAULT.String(): "set_default",
		pg_query.VariableSetKind_VAR_SET_CURRENT.String(): "set_current",
		pg_query.VariableSetKind_VAR_SET_MULTI.String():   "set_multi",
		pg_query.VariableSetKind_VAR_RESET.String():       "reset",
		pg_query.VariableSetKind_VAR_RESET_ALL.String():   "reset_all",
	}
	transactionKinds = enumWords(pg_query.TransactionStmtKind(0).Descriptor(), "TRANS_STMT_")
)

// messageKinds are the messages the walker handles by name.
func messageKinds() map[protoreflect.FullName]msgKind {
	kinds := map[protoreflect.FullName]msgKind{}
	for m, k := range map[proto.Message]msgKind{
		&pg_query.Node{}:    kindNode,
		&pg_query.A_Const{}: kindLeaf, &pg_query.ParamRef{}: kindLeaf, &pg_query.ColumnRef{}: kindLeaf,
		&pg_query.String{}: kindLeaf, &pg_query.Integer{}: kindLeaf, &pg_query.Float{}: kindLeaf,
		&pg_query.Boolean{}: kindLeaf, &pg_query.BitString{}: kindLeaf, &pg_query.A_Star{}: kindLeaf,
		&pg_query.RangeVar{}: kindRangeVar, &pg_query.FuncCall{}: kindFuncCall,
		&pg_query.SelectStmt{}: kindSelect, &pg_query.InsertStmt{}: kindInsert, &pg_query.UpdateStmt{}: kindFilteredDML,
		&pg_query.DeleteStmt{}: kindFilteredDML, &pg_query.MergeStmt{}: kindMerge, &pg_query.CopyStmt{}: kindCopy,
		&pg_query.LockStmt{}: kindLockTarget, &pg_query.TruncateStmt{}: kindLockTarget,
		&pg_query.TypeName{}: kindTypeName, &pg_query.TypeCast{}: kindTypeCast,
		&pg_query.A_Expr{}: kindOperators, &pg_query.SubLink{}: kindOperators, &pg_query.SortBy{}: kindOperators,
		&pg_query.CaseExpr{}: kindOperators, &pg_query.JoinExpr{}: kindOperators,
	} {
		kinds[m.ProtoReflect().Descriptor().FullName()] = k
	}
	return kinds
}

// buildInfo describes md and every message reachable from it; seen breaks
// the cycles (a Node holds messages that hold Nodes).
func buildInfo(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]*msgInfo) *msgInfo {
	if mi, ok := seen[md.FullName()]; ok {
		return mi
	}
	mi := &msgInfo{kind: kindByMessage[md.FullName()], typeName: string(md.Name()), fields: map[string]fieldInfo{}}
	seen[md.FullName()] = mi
	fds := md.Fields()
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		f := fieldInfo{list: fd.IsList()}
		if fd.Kind() == protoreflect.MessageKind && !fd.IsMap() {
			f.msg = buildInfo(fd.Message(), seen)
			if mi.kind == kindNode {
				f.msg.command = commandName(string(fd.Message().Name()))
			}
		}
		mi.fields[fd.JSONName()] = f
	}
	return mi
}

func jsonName(m proto.Message, field protoreflect.Name) string {
	fd := m.ProtoReflect().Descriptor().Fields().ByName(field)
	if fd == nil {
		panic("sqlfacts: pg_query has no field " + string(field))
	}
	return fd.JSONName()
}

// nodeKey is the key of m's type in a Node object.
func nodeKey(m proto.Message) string {
	want := m.ProtoReflect().Descriptor().FullName()
	fds := (&pg_query.Node{}).ProtoReflect().Descriptor().Fields()
	for i := 0; i < fds.Len(); i++ {
		if fd := fds.Get(i); fd.Message() != nil && fd.Message().FullName() == want {
			return fd.JSONName()
		}
	}
	panic("sqlfacts: Node has no member " + string(want))
}

// enumWords maps each value name of ed to its lower-cased name without
// prefix: TRANS_STMT_BEGIN → "begin".
func enumWords(ed protoreflect.EnumDescriptor, prefix string) map[string]string {
	m := map[string]string{}
	vs := ed.Values()
	for i := 0; i < vs.Len(); i++ {
		n := string(vs.Get(i).Name())
		m[n] = strings.ToLower(strings.TrimPrefix(n, prefix))
	}
	return m
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

// commandName is the snake_case name of a statement node's type without
// its "Stmt" suffix: SelectStmt → "select", AlterSystemStmt →
// "alter_system".
func commandName(typeName string) string {
	name := snake(strings.TrimSuffix(typeName, "Stmt"))
	if r, ok := renames[name]; ok {
		name = r
	}
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
