// Package sqlfacts turns SQL text into the facts the egress.sql policy
// decides on: one Statement per statement of a query, parsed by pg_query
// (PostgreSQL's own parser) after a cheap pre-scan that bounds what the C
// parser is given. Facts describe what a statement does — its command, every
// relation it reads or writes, every function it calls, COPY, SET,
// transaction control — never the values it carries.
package sqlfacts

import (
	"encoding/binary"
	"math"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/egressd/egressd/policy"
)

// Relation roles.
const (
	RoleRead  = "read"
	RoleWrite = "write"
)

// Relation is a table, view or sequence a statement names.
type Relation struct {
	// Schema is the resolved schema: as written, else pg_catalog for
	// pg_-prefixed names (the catalog is searched first), else the first
	// schema of the session's search_path.
	Schema string `json:"schema"`
	Name   string `json:"name"`
	// Role is RoleRead or RoleWrite (a DML target, SELECT INTO, COPY FROM,
	// LOCK, TRUNCATE).
	Role string `json:"role"`
}

// Function is a function called anywhere in a statement.
type Function struct {
	// Schema is empty when unqualified.
	Schema string `json:"schema"`
	Name   string `json:"name"`
}

// Operator is an operator a statement applies: as written (`a + b`,
// `OPERATOR(app.#!#)`), or as the grammar implies it (IN and CASE compare
// with =, NOT IN with <>, LIKE is ~~, BETWEEN is >= and <=). An operator
// calls a function the statement never names; the gate resolves operators
// against the upstream catalog (see Catalog).
type Operator struct {
	// Schema is empty when unqualified.
	Schema string `json:"schema"`
	Name   string `json:"name"`
}

// Copy describes a COPY statement.
type Copy struct {
	// Direction is "from" (into a table) or "to".
	Direction string `json:"direction"`
	// Program is set for COPY … PROGRAM.
	Program bool `json:"program"`
	// File is set when a server-side file (or program) is named rather
	// than STDIN/STDOUT.
	File bool `json:"file"`
	// Table is set when a whole table is copied rather than a query.
	Table bool `json:"table"`
}

// Set describes SET, RESET and SET TRANSACTION.
type Set struct {
	// Name is the lower-cased parameter ("role", "session_authorization",
	// "client_encoding", …); empty for RESET ALL.
	Name string `json:"name"`
	// Action is "set", "set_default", "set_current", "set_multi", "reset"
	// or "reset_all".
	Action string `json:"action"`
	Local  bool   `json:"local"`
	// Value is the value as the server receives it: each constant's text
	// (a number as written), joined by ", " for a list; "?" stands for a
	// value that is not a plain constant. Empty without a value.
	Value string `json:"value"`
	// TimeMS is Value read as a time setting reads it (a number with an
	// optional unit us, ms, s, min, h or d; a bare number is
	// milliseconds); nil when it is not one.
	TimeMS *float64 `json:"time_ms,omitempty"`
	// MemoryKB is Value read as a memory setting reads it (units B, kB,
	// MB, GB, TB; a bare number is kB); nil when it is not one.
	MemoryKB *float64 `json:"memory_kb,omitempty"`
}

// Statement is the facts of one SQL statement. It implements policy.Facts.
type Statement struct {
	// Database is the session's database.
	Database string `json:"database"`
	// Command is the statement kind in snake_case: "select", "insert",
	// "copy", "do", "create_table", "alter_system", ….
	Command string `json:"command"`
	// DDL is set for every command that is not query, DML, session or
	// transaction control; unknown commands count as DDL.
	DDL       bool       `json:"ddl"`
	Relations []Relation `json:"relations"`
	Functions []Function `json:"functions"`
	// Operators are the operators applied anywhere in the statement.
	Operators []Operator `json:"operators"`
	// WritableCTE is set when a WITH query is INSERT/UPDATE/DELETE/MERGE.
	WritableCTE bool `json:"writable_cte"`
	// SelectInto is set for SELECT … INTO (which creates a table).
	SelectInto bool `json:"select_into"`
	// Locking is set for SELECT … FOR UPDATE/SHARE anywhere.
	Locking bool `json:"locking"`
	// HasWhere is set when the statement is an UPDATE or DELETE with a
	// WHERE clause.
	HasWhere bool `json:"has_where"`
	// MissingWhere is set when any UPDATE or DELETE anywhere in the
	// statement (a WITH query, COPY's query, what EXPLAIN or PREPARE
	// wraps) has no WHERE, a MERGE updates or deletes matched rows in a
	// WHEN MATCHED clause without an AND condition of its own, or an
	// INSERT of a query's rows does ON CONFLICT DO UPDATE without WHERE.
	MissingWhere bool `json:"missing_where"`
	// DynamicName is set when a relation or function is named by a value
	// the facts cannot resolve: `nextval(col)`, `$1::regclass`, an OID, a
	// string that is not a name.
	DynamicName bool `json:"dynamic_name"`
	// ExplainAnalyze is set for EXPLAIN ANALYZE.
	ExplainAnalyze bool `json:"explain_analyze"`
	// Transaction is the transaction-control kind: "begin", "commit",
	// "rollback", "savepoint", "prepare", … Empty otherwise.
	Transaction string `json:"transaction,omitempty"`
	// Channel is the LISTEN/NOTIFY/UNLISTEN channel.
	Channel string `json:"channel,omitempty"`
	Copy    *Copy  `json:"copy,omitempty"`
	Set     *Set   `json:"set,omitempty"`
	// Settings are the settings the statement changes, by the names
	// PostgreSQL changes (see Setting); nil when none.
	Settings []Setting `json:"settings,omitempty"`
	// Inner is the statement that EXPLAIN, PREPARE, DECLARE CURSOR and
	// COPY (query) wrap.
	Inner *Statement `json:"inner,omitempty"`

	// Text is this statement's slice of the query text.
	Text string `json:"-"`
	// ConstantFacts is set when some fact was read from a constant's
	// value (a sequence or relation named by a string, a setting's value),
	// or could have been (a literal the tree keeps as an option value, a
	// type modifier or a utility statement's string rather than as a
	// constant): texts that differ only in literals, and so have one
	// sqlparse.Key, may then have different facts.
	ConstantFacts bool `json:"-"`
	// casts are the type names (last component) the statement casts to,
	// for Catalog.resolve; they reach the policy only as the functions a
	// user-defined cast calls.
	casts []string
	// opsBuf backs Operators for statements with few of them, saving the
	// allocations of growing the slice.
	opsBuf [4]Operator
	// AuditSQL is Text with every literal replaced by $n and comments
	// dropped, checked against the parse tree (RedactionFailed when the
	// tree contradicts it): what an audit record may hold. Not a fact.
	AuditSQL string `json:"-"`
}

// Connect is the statement a session's login is decided as: "may this
// identity use db", a connect with no relations. The gate and a replay of
// its records build it here, so both ask the same question.
func Connect(db string) *Statement {
	return &Statement{Command: "connect", Database: db, Relations: []Relation{}, Functions: []Function{}}
}

// Kind is policy.KindSQL.
func (s *Statement) Kind() policy.Kind { return policy.KindSQL }

// AppendKey appends a complete, unambiguous encoding of the facts (Text is
// not part of it: statements that differ only in literals share a key).
func (s *Statement) AppendKey(dst []byte) []byte {
	dst = appendStr(dst, s.Database)
	return s.appendKey(dst)
}

func (s *Statement) appendKey(dst []byte) []byte {
	dst = appendStr(dst, s.Command)
	var flags byte
	for i, b := range []bool{s.DDL, s.WritableCTE, s.SelectInto, s.Locking, s.HasWhere, s.ExplainAnalyze, s.MissingWhere, s.DynamicName} {
		if b {
			flags |= 1 << i
		}
	}
	dst = append(dst, flags)
	dst = binary.AppendUvarint(dst, uint64(len(s.Relations)))
	for _, r := range s.Relations {
		dst = appendStr(appendStr(appendStr(dst, r.Schema), r.Name), r.Role)
	}
	dst = binary.AppendUvarint(dst, uint64(len(s.Functions)))
	for _, f := range s.Functions {
		dst = appendStr(appendStr(dst, f.Schema), f.Name)
	}
	dst = binary.AppendUvarint(dst, uint64(len(s.Operators)))
	for _, o := range s.Operators {
		dst = appendStr(appendStr(dst, o.Schema), o.Name)
	}
	dst = appendStr(appendStr(dst, s.Transaction), s.Channel)
	if c := s.Copy; c != nil {
		dst = append(dst, 'c')
		dst = appendStr(dst, c.Direction)
		dst = append(dst, b2b(c.Program), b2b(c.File), b2b(c.Table))
	} else {
		dst = append(dst, '-')
	}
	if v := s.Set; v != nil {
		dst = append(dst, 's')
		dst = appendStr(appendStr(appendStr(dst, v.Name), v.Action), v.Value)
		dst = append(dst, b2b(v.Local))
		dst = appendNum(appendNum(dst, v.TimeMS), v.MemoryKB)
	} else {
		dst = append(dst, '-')
	}
	dst = binary.AppendUvarint(dst, uint64(len(s.Settings)))
	for _, c := range s.Settings {
		dst = appendStr(appendStr(dst, c.Name), c.Value)
	}
	if s.Inner != nil {
		dst = append(dst, 'i')
		return s.Inner.appendKey(dst)
	}
	return append(dst, '-')
}

func b2b(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func appendNum(dst []byte, f *float64) []byte {
	if f == nil {
		return append(dst, '-')
	}
	return binary.LittleEndian.AppendUint64(append(dst, 'n'), math.Float64bits(*f))
}

func appendStr(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// AddTo sets input.database and input.statement, with the statement's
// flags (input.statement.flags; see Flags).
func (s *Statement) AddTo(input ast.Object) {
	input.Insert(ast.StringTerm("database"), ast.StringTerm(s.Database))
	o := s.object()
	o.Insert(ast.StringTerm("flags"), s.flagsTerm())
	input.Insert(ast.StringTerm("statement"), ast.NewTerm(o))
}

func (s *Statement) object() ast.Object {
	rels := make([]*ast.Term, len(s.Relations))
	for i, r := range s.Relations {
		rels[i] = ast.ObjectTerm(
			ast.Item(ast.StringTerm("schema"), ast.StringTerm(r.Schema)),
			ast.Item(ast.StringTerm("name"), ast.StringTerm(r.Name)),
			ast.Item(ast.StringTerm("role"), ast.StringTerm(r.Role)),
		)
	}
	funcs := make([]*ast.Term, len(s.Functions))
	for i, f := range s.Functions {
		funcs[i] = ast.ObjectTerm(
			ast.Item(ast.StringTerm("schema"), ast.StringTerm(f.Schema)),
			ast.Item(ast.StringTerm("name"), ast.StringTerm(f.Name)),
		)
	}
	ops := make([]*ast.Term, len(s.Operators))
	for i, op := range s.Operators {
		ops[i] = ast.ObjectTerm(
			ast.Item(ast.StringTerm("schema"), ast.StringTerm(op.Schema)),
			ast.Item(ast.StringTerm("name"), ast.StringTerm(op.Name)),
		)
	}
	settings := make([]*ast.Term, len(s.Settings))
	for i, c := range s.Settings {
		settings[i] = ast.ObjectTerm(
			ast.Item(ast.StringTerm("name"), ast.StringTerm(c.Name)),
			ast.Item(ast.StringTerm("value"), ast.StringTerm(c.Value)),
		)
	}
	o := ast.NewObject(
		ast.Item(ast.StringTerm("command"), ast.StringTerm(s.Command)),
		ast.Item(ast.StringTerm("ddl"), ast.BooleanTerm(s.DDL)),
		ast.Item(ast.StringTerm("relations"), ast.ArrayTerm(rels...)),
		ast.Item(ast.StringTerm("functions"), ast.ArrayTerm(funcs...)),
		ast.Item(ast.StringTerm("operators"), ast.ArrayTerm(ops...)),
		ast.Item(ast.StringTerm("writable_cte"), ast.BooleanTerm(s.WritableCTE)),
		ast.Item(ast.StringTerm("select_into"), ast.BooleanTerm(s.SelectInto)),
		ast.Item(ast.StringTerm("locking"), ast.BooleanTerm(s.Locking)),
		ast.Item(ast.StringTerm("has_where"), ast.BooleanTerm(s.HasWhere)),
		ast.Item(ast.StringTerm("missing_where"), ast.BooleanTerm(s.MissingWhere)),
		ast.Item(ast.StringTerm("dynamic_name"), ast.BooleanTerm(s.DynamicName)),
		ast.Item(ast.StringTerm("explain_analyze"), ast.BooleanTerm(s.ExplainAnalyze)),
		ast.Item(ast.StringTerm("transaction"), ast.StringTerm(s.Transaction)),
		ast.Item(ast.StringTerm("channel"), ast.StringTerm(s.Channel)),
		ast.Item(ast.StringTerm("settings"), ast.ArrayTerm(settings...)),
	)
	if c := s.Copy; c != nil {
		o.Insert(ast.StringTerm("copy"), ast.ObjectTerm(
			ast.Item(ast.StringTerm("direction"), ast.StringTerm(c.Direction)),
			ast.Item(ast.StringTerm("program"), ast.BooleanTerm(c.Program)),
			ast.Item(ast.StringTerm("file"), ast.BooleanTerm(c.File)),
			ast.Item(ast.StringTerm("table"), ast.BooleanTerm(c.Table)),
		))
	}
	if v := s.Set; v != nil {
		set := ast.NewObject(
			ast.Item(ast.StringTerm("name"), ast.StringTerm(v.Name)),
			ast.Item(ast.StringTerm("action"), ast.StringTerm(v.Action)),
			ast.Item(ast.StringTerm("local"), ast.BooleanTerm(v.Local)),
			ast.Item(ast.StringTerm("value"), ast.StringTerm(v.Value)),
		)
		if v.TimeMS != nil {
			set.Insert(ast.StringTerm("time_ms"), ast.FloatNumberTerm(*v.TimeMS))
		}
		if v.MemoryKB != nil {
			set.Insert(ast.StringTerm("memory_kb"), ast.FloatNumberTerm(*v.MemoryKB))
		}
		o.Insert(ast.StringTerm("set"), ast.NewTerm(set))
	}
	if s.Inner != nil {
		o.Insert(ast.StringTerm("inner"), ast.NewTerm(s.Inner.object()))
	}
	return o
}
