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

// walker collects relations and functions from every node of one
// statement's JSON parse tree. It walks every message generically, guided
// by its descriptor, so that a node kind the code does not name (a new
// expression form, a clause of a DDL statement) is still searched for
// RangeVar and FuncCall; only the nodes whose meaning depends on their
// position (DML targets, WITH scopes) are handled by name.
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
	// unqualified name that matches one is not a table.
	ctes []string
	// depth is how many msg calls are open (see maxWalkDepth).
	depth int
}

// maxWalkDepth bounds the walk's recursion, two msg calls per tree level.
// Go cannot recover from a goroutine stack overflow either, and a tree
// from the contained parser may be tens of thousands of levels deep (a
// chain of ISNULL); no query anyone writes comes near 10,000 levels.
const maxWalkDepth = 20000

func (w *walker) visibleCTE(name string) bool {
	for i := len(w.ctes) - 1; i >= 0; i-- {
		if w.ctes[i] == name {
			return true
		}
	}
	return false
}

// relation records the RangeVar object rv (absent: -1) in role.
func (w *walker) relation(rv int32, role string) {
	if !w.d.Present(rv) {
		return
	}
	schema, name := w.d.Str(w.d.Get(rv, keySchemaname)), w.d.Str(w.d.Get(rv, keyRelname))
	if schema == "" && w.visibleCTE(name) {
		return
	}
	if schema == "" {
		if strings.HasPrefix(name, "pg_") {
			schema = "pg_catalog"
		} else {
			schema = w.defSchema
		}
	}
	// Statements name few relations: a scan beats a map.
	for _, x := range w.st.Relations {
		if x.Schema == schema && x.Name == name && x.Role == role {
			return
		}
	}
	// Clones: the facts must not pin the whole JSON document.
	w.st.Relations = append(w.st.Relations, Relation{Schema: strings.Clone(schema), Name: strings.Clone(name), Role: role})
}

// function records the function named by the list of String nodes names.
func (w *walker) function(names int32) {
	d := w.d
	n, last, prev := 0, int32(-1), int32(-1)
	_ = d.Items(names, func(e int32) error {
		n, prev, last = n+1, last, e
		return nil
	})
	var schema, name string
	switch n {
	case 0:
		return
	case 1:
		name = d.Str(d.Get(d.Get(last, nodeString), keySval))
	default:
		schema = d.Str(d.Get(d.Get(prev, nodeString), keySval))
		name = d.Str(d.Get(d.Get(last, nodeString), keySval))
	}
	for _, x := range w.st.Functions {
		if x.Schema == schema && x.Name == name {
			return
		}
	}
	w.st.Functions = append(w.st.Functions, Function{Schema: strings.Clone(schema), Name: strings.Clone(name)})
}

// with walks a WITH clause and leaves its names visible; the caller pops
// them with w.ctes = w.ctes[:mark]. A non-recursive CTE sees only the CTEs
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
			w.ctes = append(w.ctes, d.Str(d.Get(d.Get(e, nodeCommonTableExpr), keyCtename)))
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
			w.ctes = append(w.ctes, d.Str(d.Get(cte, keyCtename)))
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
		w.relation(v, RoleRead)
		return nil
	case kindLockTarget:
		return d.Items(d.Get(v, keyRelations), func(e int32) error {
			w.relation(d.Get(e, nodeRangeVar), RoleWrite)
			return nil
		})
	}
	mark := len(w.ctes)
	defer func() { w.ctes = w.ctes[:mark] }()
	switch mi.kind {
	case kindFuncCall:
		w.function(d.Get(v, keyFuncname))
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
			w.relation(d.Get(into, keyIntoRel), RoleWrite)
		}
		return w.fields(mi, v, keyWithClause, keyIntoClause)
	case kindDML:
		if err := w.with(d.Get(v, keyWithClause)); err != nil {
			return err
		}
		w.relation(d.Get(v, keyRelation), RoleWrite)
		return w.fields(mi, v, keyWithClause, keyRelation)
	case kindCopy:
		role := RoleRead
		if d.Truthy(d.Get(v, keyIsFrom)) {
			role = RoleWrite
		}
		w.relation(d.Get(v, keyRelation), role)
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
