package sqlfacts

import (
	"errors"
	"fmt"
	"strings"

	"github.com/egressd/egressd/policy/sqlfacts/internal/jsontree"
)

var errTree = errors.New("unexpected parse tree")

func treeErr(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errTree}, a...)...)
}

// nodeType is a Node object's one key (its type) and that key's value;
// "" and -1 for an absent or empty Node.
func nodeType(d *jsontree.Doc, v int32) (string, int32) {
	if d.Kind(v) != jsontree.Object || d.Next(v) == v+1 {
		return "", -1
	}
	return d.Raw(v + 1), v + 2
}

// smallList is the length up to which the walker looks names up by
// scanning a slice; past it, it keeps a map, so that a statement naming
// tens of thousands of relations or CTEs is walked in linear time.
const smallList = 16

// walker collects relations and functions from every node of one
// statement's JSON parse tree. It walks every message generically, guided
// by its descriptor, so that a node kind the code does not name (a new
// expression form, a clause of a DDL statement) is still searched for
// RangeVar, FuncCall and TypeName; only the nodes whose meaning depends on
// their position (DML targets, WITH scopes, casts to reg* types) are
// handled by name.
//
// A key that the message's descriptor does not have, or a value of the
// wrong shape, is an error and the statement is denied: the JSON and the
// descriptors come from the same pg_query release, so a mismatch means
// the tree is not what the walker understands, and skipping the part it
// cannot place could skip a relation.
type walker struct {
	d         *jsontree.Doc
	st        *Statement
	defSchema string
	// ctes is the stack of CTE names visible at the current node: an
	// unqualified name that matches one is not a table. cteIndex counts
	// them by name once the stack is longer than smallList.
	ctes     []string
	cteIndex map[string]int
	// relIndex and funcIndex hold st.Relations and st.Functions once
	// they are longer than smallList.
	relIndex  map[Relation]struct{}
	funcIndex map[Function]struct{}
	// work counts the names the lookups above examine: the test of the
	// walker's linear bound reads it.
	work int
	// cat and seenOps serve operators.go.
	cat     *Catalog
	seenOps map[Operator]bool
	// depth is how many msg calls are open (see maxWalkDepth).
	depth int
}

func (w *walker) pushCTE(name string) {
	w.ctes = append(w.ctes, name)
	switch {
	case w.cteIndex != nil:
		w.cteIndex[name]++
	case len(w.ctes) > smallList:
		w.cteIndex = make(map[string]int, 2*len(w.ctes))
		for _, n := range w.ctes {
			w.cteIndex[n]++
		}
	}
}

// popCTEs ends the scope of the CTEs pushed after mark.
func (w *walker) popCTEs(mark int) {
	if w.cteIndex != nil {
		for _, n := range w.ctes[mark:] {
			if w.cteIndex[n]--; w.cteIndex[n] == 0 {
				delete(w.cteIndex, n)
			}
		}
	}
	w.ctes = w.ctes[:mark]
}

// maxWalkDepth bounds the walk's recursion, two msg calls per tree level.
// Go cannot recover from a goroutine stack overflow either, and a tree
// from the contained parser may be tens of thousands of levels deep (a
// chain of ISNULL); no query anyone writes comes near 10,000 levels.
const maxWalkDepth = 20000

func (w *walker) visibleCTE(name string) bool {
	if w.cteIndex != nil {
		w.work++
		return w.cteIndex[name] > 0
	}
	for i := len(w.ctes) - 1; i >= 0; i-- {
		w.work++
		if w.ctes[i] == name {
			return true
		}
	}
	return false
}

// rangeVar records the RangeVar object rv (absent: -1) read in a FROM
// list or similar position, where an unqualified name may be a CTE.
func (w *walker) rangeVar(rv int32) {
	if !w.d.Present(rv) {
		return
	}
	schema, name := w.d.Str(w.d.Get(rv, keySchemaname)), w.d.Str(w.d.Get(rv, keyRelname))
	if schema == "" && w.visibleCTE(name) {
		return
	}
	w.relation(schema, name, RoleRead)
}

// target records the RangeVar object rv (absent: -1) in role. A target —
// of INSERT, UPDATE, DELETE, MERGE, COPY, LOCK, SELECT INTO — is always a
// table, never a CTE of the same name: PostgreSQL does not look targets up
// among the CTEs, so `WITH t AS (SELECT 1) DELETE FROM t` deletes from
// the table t.
func (w *walker) target(rv int32, role string) {
	if !w.d.Present(rv) {
		return
	}
	w.relation(w.d.Str(w.d.Get(rv, keySchemaname)), w.d.Str(w.d.Get(rv, keyRelname)), role)
}

// relation records schema.name in role, resolving an unqualified name as
// PostgreSQL does with the session's search path: pg_catalog first (where
// every pg_-prefixed name is), then the first schema.
func (w *walker) relation(schema, name, role string) {
	if schema == "" {
		if strings.HasPrefix(name, "pg_") {
			schema = "pg_catalog"
		} else {
			schema = w.defSchema
		}
	}
	addUnique(&w.st.Relations, &w.relIndex, Relation{Schema: schema, Name: name, Role: role}, &w.work, ownRelation)
}

// function records the function named by the list of String nodes names
// and returns its schema ("" when unqualified) and name.
func (w *walker) function(names int32) (schema, name string) {
	schema, name, n := lastTwo(w.d, names)
	if n == 0 {
		return "", ""
	}
	w.addFunction(schema, name)
	return schema, name
}

func (w *walker) addFunction(schema, name string) {
	addUnique(&w.st.Functions, &w.funcIndex, Function{Schema: schema, Name: name}, &w.work, ownFunction)
}

// addUnique appends v to *list unless the list holds it already, looking
// it up by a scan while the list is at most smallList long and in *index
// (built then) past that, and counts the entries examined in *work. own
// copies v's strings before v is kept: the facts must not pin the whole
// JSON document.
func addUnique[T comparable](list *[]T, index *map[T]struct{}, v T, work *int, own func(T) T) {
	if *index != nil {
		*work++
		if _, ok := (*index)[v]; ok {
			return
		}
	} else {
		for _, x := range *list {
			*work++
			if x == v {
				return
			}
		}
	}
	v = own(v)
	*list = append(*list, v)
	switch {
	case *index != nil:
		(*index)[v] = struct{}{}
	case len(*list) > smallList:
		*index = make(map[T]struct{}, 2*len(*list))
		for _, x := range *list {
			(*index)[x] = struct{}{}
		}
	}
}

func ownRelation(r Relation) Relation {
	r.Schema, r.Name = strings.Clone(r.Schema), strings.Clone(r.Name)
	return r
}

func ownFunction(f Function) Function {
	f.Schema, f.Name = strings.Clone(f.Schema), strings.Clone(f.Name)
	return f
}

// lastTwo is the last two names of the list of String nodes names (a
// qualified name: [catalog.]schema.name), and how many it holds.
func lastTwo(d *jsontree.Doc, names int32) (schema, name string, n int) {
	last, prev := int32(-1), int32(-1)
	_ = d.Items(names, func(e int32) error {
		n, prev, last = n+1, last, e
		return nil
	})
	if n == 0 {
		return "", "", 0
	}
	name = d.Str(d.Get(d.Get(last, nodeString), keySval))
	if n > 1 {
		schema = d.Str(d.Get(d.Get(prev, nodeString), keySval))
	}
	return schema, name, n
}

// with walks a WITH clause and leaves its names visible; the caller pops
// them with w.popCTEs. A non-recursive CTE sees only the CTEs
// before it: `WITH t AS (SELECT * FROM t)` reads the table t.
func (w *walker) with(wc int32) error {
	d := w.d
	if !d.Present(wc) {
		return nil
	}
	recursive := d.Truthy(d.Get(wc, keyRecursive))
	ctes := d.Get(wc, keyCtes)
	if recursive {
		_ = d.Items(ctes, func(e int32) error {
			w.pushCTE(d.Str(d.Get(d.Get(e, nodeCommonTableExpr), keyCtename)))
			return nil
		})
	}
	return d.Items(ctes, func(e int32) error {
		cte := d.Get(e, nodeCommonTableExpr)
		if cte < 0 {
			return nil
		}
		q := d.Get(cte, keyCtequery)
		switch typ, _ := nodeType(d, q); typ {
		case nodeInsertStmt, nodeUpdateStmt, nodeDeleteStmt, nodeMergeStmt:
			w.st.WritableCTE = true
		}
		if err := w.msg(nodeInfo, q); err != nil {
			return err
		}
		if !recursive {
			w.pushCTE(d.Str(d.Get(cte, keyCtename)))
		}
		return nil
	})
}

// msg walks the value v (absent: -1) as a message of type mi.
func (w *walker) msg(mi *msgInfo, v int32) error {
	d := w.d
	if !d.Present(v) {
		return nil
	}
	if w.depth++; w.depth > maxWalkDepth {
		return tooComplex("parse tree deeper than %d levels", maxWalkDepth/2)
	}
	defer func() { w.depth-- }()
	if d.Kind(v) != jsontree.Object {
		return treeErr("%s is not an object at %d", mi.typeName, d.Offset(v))
	}
	switch mi.kind {
	case kindNode:
		// One key, the member's type; none for a NULL list element.
		for k := v + 1; k < d.Next(v); k = d.Next(k + 1) {
			f, ok := mi.fields[d.Raw(k)]
			if !ok || f.msg == nil {
				return treeErr("unknown node type %q", d.Raw(k))
			}
			if err := w.msg(f.msg, k+1); err != nil {
				return err
			}
		}
		return nil
	case kindLeaf:
		// Leaves (a ColumnRef holds only Strings and A_Star): the most
		// common nodes, not worth walking.
		return nil
	case kindRangeVar:
		w.rangeVar(v)
		return nil
	case kindLockTarget:
		return d.Items(d.Get(v, keyRelations), func(e int32) error {
			w.target(d.Get(e, nodeRangeVar), RoleWrite)
			return nil
		})
	case kindTypeName:
		w.typeName(v)
		return w.fields(mi, v, "", "")
	case kindTypeCast:
		// The cast target is recorded by the TypeName walked below.
		w.cast(d.Get(v, keyArg), d.Get(v, keyTypeName))
		return w.fields(mi, v, "", "")
	}
	mark := len(w.ctes)
	defer w.popCTEs(mark)
	switch mi.kind {
	case kindFuncCall:
		schema, name := w.function(d.Get(v, keyFuncname))
		w.nameArgs(schema, name, d.Get(v, keyArgs))
	case kindOperators:
		w.operators(mi, v)
	case kindSelect:
		// WITH first: its names scope the rest of the statement, and the
		// JSON has it near the end.
		if err := w.with(d.Get(v, keyWithClause)); err != nil {
			return err
		}
		if d.NonEmpty(d.Get(v, keyLocking)) {
			w.st.Locking = true
		}
		if into := d.Get(v, keyIntoClause); d.Present(into) {
			w.st.SelectInto = true
			w.target(d.Get(into, keyIntoRel), RoleWrite)
		}
		return w.fields(mi, v, keyWithClause, keyIntoClause)
	case kindInsert, kindFilteredDML, kindMerge:
		if err := w.with(d.Get(v, keyWithClause)); err != nil {
			return err
		}
		w.target(d.Get(v, keyRelation), RoleWrite)
		switch mi.kind {
		case kindInsert:
			if upsertUnfiltered(d, v) {
				w.st.MissingWhere = true
			}
		case kindFilteredDML:
			if !d.Present(d.Get(v, keyWhere)) {
				w.st.MissingWhere = true
			}
		case kindMerge:
			if mergeUnfiltered(d, d.Get(v, keyMergeWhen)) {
				w.st.MissingWhere = true
			}
		}
		return w.fields(mi, v, keyWithClause, keyRelation)
	case kindCopy:
		role := RoleRead
		if d.Truthy(d.Get(v, keyIsFrom)) {
			role = RoleWrite
		}
		w.target(d.Get(v, keyRelation), role)
		return w.fields(mi, v, keyRelation, "")
	}
	return w.fields(mi, v, "", "")
}

// fields walks every message-typed field of the object v except skip1 and
// skip2, in document order, which is the descriptor's field order
// (TestJSONCarriesTheTree), so relations and functions are listed in tree
// order. (protobuf-go's Range, which the walker used before, swaps two
// adjacent fields of some messages depending on a hash of the binary, so
// that order varied from build to build.)
func (w *walker) fields(mi *msgInfo, v int32, skip1, skip2 string) error {
	d := w.d
	for k := v + 1; k < d.Next(v); k = d.Next(k + 1) {
		key := d.Raw(k)
		f, ok := mi.fields[key]
		if !ok {
			return treeErr("unknown field %s.%s", mi.typeName, key)
		}
		val := k + 1
		if f.msg == nil {
			// A scalar, enum or list of them: nothing to find, but an
			// object here would be a subtree the walker cannot place.
			for i := val; i < d.Next(val); i++ {
				if d.Kind(i) == jsontree.Object {
					return treeErr("object in scalar field %s.%s", mi.typeName, key)
				}
			}
			continue
		}
		if key == skip1 || key == skip2 {
			continue
		}
		if !f.list {
			if err := w.msg(f.msg, val); err != nil {
				return err
			}
			continue
		}
		switch d.Kind(val) {
		case jsontree.Null:
			continue
		case jsontree.Array:
		default:
			return treeErr("list field %s.%s is not an array", mi.typeName, key)
		}
		for e := val + 1; e < d.Next(val); e = d.Next(e) {
			// IntList and OidList items are bare numbers in the JSON.
			if d.Kind(e) == jsontree.Number {
				continue
			}
			if err := w.msg(f.msg, e); err != nil {
				return err
			}
		}
	}
	return nil
}
