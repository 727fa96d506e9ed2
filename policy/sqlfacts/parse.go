package sqlfacts

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/egressd/egressd/policy"
	"github.com/egressd/egressd/policy/sqlfacts/internal/jsontree"
	"github.com/egressd/egressd/policy/sqlparse"
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
	// Tokens, if set, are the text's tokens from PrescanTokens with these
	// Limits: the caller pre-scanned it, and the scan (a cgo call) is not
	// repeated. If nil, ParseContext pre-scans the text itself.
	Tokens []sqlparse.Token

	// work, if not nil, is added the walkers' lookups (walker.work), for
	// the test of the extraction's linear bound.
	work *int
	// Catalog is what the session's database defines outside pg_catalog:
	// every call, operator and cast that can resolve to one of its
	// functions adds that function to the facts. If nil, every function,
	// operator and cast is assumed to be a built-in.
	Catalog *Catalog
}

// Parse is ParseContext with a context that never ends.
func Parse(sql string, opt Options) ([]*Statement, error) {
	return ParseContext(context.Background(), sql, opt)
}

// ParseContext pre-scans sql, parses it with pg_query (through package
// sqlparse, which contains a crash) and returns the facts of each statement
// in order. Every error is a *policy.DenyError with reason sql_too_complex,
// sql_invalid_utf8 or sql_parse_error. An empty query (only comments or
// semicolons) yields no statements. When ctx ends (the client left), a
// parse running in a worker is killed and the text denied.
//
// pg_query's JSON output is read rather than its protobuf: the protobuf-c
// serializer and the Go unmarshalling cost several times the parse itself.
func ParseContext(ctx context.Context, sql string, opt Options) ([]*Statement, error) {
	toks := opt.Tokens
	if toks == nil {
		var err error
		if toks, err = PrescanTokens(sql, opt.Limits); err != nil {
			return nil, err
		}
	}
	tree, err := sqlparse.ParseToJSON(ctx, sql)
	if err != nil {
		return nil, parserError(err)
	}
	// Protobuf refused strings that are not UTF-8; so does this parse
	// (the JSON escapes only ASCII, so checking the document checks every
	// string in it).
	if !utf8.ValidString(tree) {
		return nil, parseError(treeErr("parse tree is not valid UTF-8"))
	}
	d := jsontree.Acquire()
	defer d.Release()
	if err := d.Parse(tree); err != nil {
		return nil, parseError(err)
	}
	def := "public"
	if len(opt.SearchPath) > 0 {
		def = opt.SearchPath[0]
	}
	stmts := d.Get(0, keyStmts)
	if stmts < 0 || d.Kind(stmts) != jsontree.Array {
		return nil, parseError(treeErr("parse tree has no statement list"))
	}
	out := []*Statement{}
	all := &tokens{src: sql, toks: toks} // every statement's audit text is redacted from these
	pb := &protoTree{ctx: ctx, sql: sql}
	err = d.Items(stmts, func(raw int32) error {
		c := classifier{d: d, defSchema: def, cat: opt.Catalog}
		st, err := c.classify(d.Get(raw, keyStmt))
		if opt.work != nil {
			*opt.work += c.work
		}
		if err != nil {
			return err
		}
		if c.inexact {
			if st.ExplainAnalyze, err = explainAnalyzeExact(pb, len(out)); err != nil {
				return err
			}
		}
		if c.inexactSet {
			if st.Set.Value, err = setValueExact(pb, len(out)); err != nil {
				return err
			}
			setQuantities(st.Set, c.setArgs)
		}
		setSettings(st)
		st.Database = opt.Database
		opt.Catalog.resolve(st, def)
		var from, to int
		if st.Text, from, to, err = stmtText(d, sql, raw); err != nil {
			return err
		}
		if c := st.Copy; c != nil && !c.File {
			c.File = copiesToString(st.Text)
		}
		var literals bool
		st.AuditSQL, literals = auditText(d, all, raw, all.within(from, to))
		// A literal the tree keeps as something other than a constant
		// (EXPLAIN (ANALYZE 'on'), a COPY file name, a type modifier)
		// may have decided a fact: texts of one sqlparse.Key must not
		// share this statement's verdict.
		st.ConstantFacts = st.ConstantFacts || !literals
		out = append(out, st)
		return nil
	})
	if err != nil {
		return nil, parseError(err)
	}
	return out, nil
}

// parseError denies sql_parse_error, unless err already is a deny (the
// walker's sql_too_complex).
func parseError(err error) error {
	var de *policy.DenyError
	if errors.As(err, &de) {
		return err
	}
	return &policy.DenyError{Reason: policy.ReasonSQLParseError, Err: err}
}

// stmtText is the statement's slice of sql. pg_query gives byte offsets; a
// zero length means "to the end".
func stmtText(d *jsontree.Doc, sql string, raw int32) (text string, from, to int, err error) {
	loc, err := d.Int(d.Get(raw, keyStmtLocation))
	if err != nil {
		return "", 0, 0, err
	}
	n, err := d.Int(d.Get(raw, keyStmtLen))
	if err != nil {
		return "", 0, 0, err
	}
	// The protobuf fields are int32.
	start, end := int(int32(loc)), len(sql)
	if int32(n) > 0 {
		end = start + int(int32(n))
	}
	if start < 0 || start > end || end > len(sql) {
		return sql, 0, len(sql), nil
	}
	return strings.TrimSpace(sql[start:end]), start, end, nil
}

// classifier builds the facts of one statement.
type classifier struct {
	d         *jsontree.Doc
	defSchema string
	// cat, if set, is the database's catalog (see Options.Catalog).
	cat *Catalog
	// inexact is set when the JSON cannot tell whether EXPLAIN's ANALYZE
	// is on (see explainAnalyze); inexactSet when it cannot tell a SET's
	// value (see setValue), which has setArgs arguments.
	inexact    bool
	inexactSet bool
	setArgs    int
	// work counts the walkers' lookups (walker.work).
	work int
}

// classify builds the facts of the statement Node object n.
func (c *classifier) classify(n int32) (*Statement, error) {
	d := c.d
	typ, v := nodeType(d, n)
	command := "unknown"
	if f, ok := nodeInfo.fields[typ]; ok && f.msg != nil {
		command = f.msg.command
	}
	st := &Statement{Command: command, Relations: []Relation{}, Functions: []Function{}}
	st.Operators = st.opsBuf[:0]
	st.DDL = !nonDDL[st.Command]
	var err error
	switch typ {
	case nodeUpdateStmt, nodeDeleteStmt:
		st.HasWhere = d.Present(d.Get(v, keyWhere))
	case nodeCopyStmt:
		program := d.Truthy(d.Get(v, keyIsProgram))
		st.Copy = &Copy{Direction: "to", Program: program, File: d.Str(d.Get(v, keyFilename)) != "" || program, Table: d.Present(d.Get(v, keyRelation))}
		if d.Truthy(d.Get(v, keyIsFrom)) {
			st.Copy.Direction = "from"
		}
		// COPY (query) TO runs its query, DML with RETURNING included.
		if q := d.Get(v, keyCopyQuery); d.Present(q) {
			st.Inner, err = c.classify(q)
		}
	case nodeVariableShow:
		// SHOW ALL lists every setting, as pg_settings does: the same read.
		if strings.EqualFold(d.Str(d.Get(v, keyShowName)), "all") {
			st.Relations = append(st.Relations, Relation{Schema: "pg_catalog", Name: "pg_settings", Role: RoleRead})
		}
	case nodeVariableSetStmt:
		action, ok := setActions[d.Str(d.Get(v, keySetKind))]
		if !ok {
			action = "unknown"
		}
		st.Set = &Set{Name: strings.Clone(strings.ToLower(d.Str(d.Get(v, keySetName)))), Action: action, Local: d.Truthy(d.Get(v, keyIsLocal))}
		var exact bool
		st.Set.Value, c.setArgs, exact = setValue(d, d.Get(v, keySetArgs))
		st.Set.Value = strings.Clone(st.Set.Value)
		c.inexactSet = !exact
		setQuantities(st.Set, c.setArgs)
		// The value is a fact from a constant (see Statement.ConstantFacts).
		st.ConstantFacts = c.setArgs > 0
		if prefix, ok := multiSettings[st.Set.Name]; ok && action == "set_multi" {
			modeSettings(d, st, d.Get(v, keySetArgs), prefix)
		}
	case nodeTransactionStmt:
		k := d.Str(d.Get(v, keyTransKind))
		if k == "" {
			// An omitted enum is its zero value.
			k = pg_query.TransactionStmtKind(0).String()
		}
		var ok bool
		if st.Transaction, ok = transactionKinds[k]; !ok {
			st.Transaction = strings.ToLower(strings.TrimPrefix(k, "TRANS_STMT_"))
		}
		modeSettings(d, st, d.Get(v, keyTransOptions), "")
	case nodeListenStmt, nodeUnlistenStmt, nodeNotifyStmt:
		st.Channel = strings.Clone(d.Str(d.Get(v, keyCondition)))
	case nodeExplainStmt:
		var exact bool
		st.ExplainAnalyze, exact = explainAnalyze(d, d.Get(v, keyOptions))
		c.inexact = c.inexact || !exact
		st.Inner, err = c.classify(d.Get(v, keyQuery))
	case nodePrepareStmt, nodeDeclareCursor:
		st.Inner, err = c.classify(d.Get(v, keyQuery))
	}
	if err != nil {
		return nil, err
	}
	w := &walker{d: d, st: st, defSchema: c.defSchema, cat: c.cat}
	err = w.msg(nodeInfo, n)
	c.work += w.work
	if err != nil {
		return nil, err
	}
	if in := st.Inner; in != nil {
		// The wrapper's own lists are the union, so a rule that looks only
		// at the outer statement still sees every relation and function.
		st.WritableCTE = st.WritableCTE || in.WritableCTE
		st.Locking = st.Locking || in.Locking
		st.SelectInto = st.SelectInto || in.SelectInto
		st.MissingWhere = st.MissingWhere || in.MissingWhere
		st.DynamicName = st.DynamicName || in.DynamicName
		st.ConstantFacts = st.ConstantFacts || in.ConstantFacts
	}
	return st, nil
}

// protoTree is pg_query's protobuf tree of one text, parsed on first need
// and then shared by every statement that needs it: a text of many
// ambiguous statements (EXPLAIN (ANALYZE 0), SET x = 0) costs one more
// parse, not one per statement.
type protoTree struct {
	ctx  context.Context
	sql  string
	tree *pg_query.ParseResult
}

// parseProto is sqlparse.Parse; a test counts its calls.
var parseProto = sqlparse.Parse

// stmt is the i-th statement of the tree.
func (p *protoTree) stmt(i int) (*pg_query.Node, error) {
	if p.tree == nil {
		tree, err := parseProto(p.ctx, p.sql)
		if err != nil {
			return nil, err
		}
		p.tree = tree
	}
	if i >= len(p.tree.Stmts) {
		return nil, fmt.Errorf("protobuf tree has %d statements, want more than %d", len(p.tree.Stmts), i)
	}
	return p.tree.Stmts[i].GetStmt(), nil
}
