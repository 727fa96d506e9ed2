package sqlfacts

import (
	"strings"
)

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
	d         *jsonDoc
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

// relation records the RangeVar object rv (absent: -1) in role.
func (w *walker) relation(rv int32, role string) {
	if !w.d.present(rv) {
		return
	}
	schema, name := w.d.str(w.d.get(rv, keySchemaname)), w.d.str(w.d.get(rv, keyRelname))
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
	_ = d.items(names, func(e int32) error {
		n, prev, last = n+1, last, e
		return nil
	})
	var schema, name string
	switch n {
	case 0:
		return
	case 1:
		name = d.str(d.get(d.get(last, nodeString), keySval))
	default:
		schema = d.str(d.get(d.get(prev, nodeString), keySval))
		name = d.str(d.get(d.get(last, nodeString), keySval))
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
	if !d.present(wc) {
		return nil
	}
	recursive := d.truthy(d.get(wc, keyRecursive))
	ctes := d.get(wc, keyCtes)
	if recursive {
		_ = d.items(ctes, func(e int32) error {
			w.ctes = append(w.ctes, d.str(d.get(d.get(e, nodeCommonTableExpr), keyCtename)))
			return nil
		})
	}
	return d.items(ctes, func(e int32) error {
		cte := d.get(e, nodeCommonTableExpr)
		if cte < 0 {
			return nil
		}
		q := d.get(cte, keyCtequery)
		switch typ, _ := d.nodeType(q); typ {
		case nodeInsertStmt, nodeUpdateStmt, nodeDeleteStmt, nodeMergeStmt:
			w.st.WritableCTE = true
		}
		if err := w.msg(nodeInfo, q); err != nil {
			return err
		}
		if !recursive {
			w.ctes = append(w.ctes, d.str(d.get(cte, keyCtename)))
		}
		return nil
	})
}

// msg walks the value v (absent: -1) as a message of type mi.
func (w *walker) msg(mi *msgInfo, v int32) error {
	d := w.d
	if !d.present(v) {
		return nil
	}
	if d.vals[v].kind != jObject {
		return jsonErr("%s is not an object at %d", mi.typeName, d.vals[v].off)
	}
	switch mi.kind {
	case kindNode:
		// One key, the member's type; none for a NULL list element.
		for k := v + 1; k < d.vals[v].next; k = d.vals[k+1].next {
			f, ok := mi.fields[d.raw(k)]
			if !ok || f.msg == nil {
				return jsonErr("unknown node type %q", d.raw(k))
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
		return d.items(d.get(v, keyRelations), func(e int32) error {
			w.relation(d.get(e, nodeRangeVar), RoleWrite)
			return nil
		})
	}
	mark := len(w.ctes)
	defer func() { w.ctes = w.ctes[:mark] }()
	switch mi.kind {
	case kindFuncCall:
		w.function(d.get(v, keyFuncname))
	case kindSelect:
		// WITH first: its names scope the rest of the statement, and the
		// JSON has it near the end.
		if err := w.with(d.get(v, keyWithClause)); err != nil {
			return err
		}
		if d.nonEmpty(d.get(v, keyLocking)) {
			w.st.Locking = true
		}
		if into := d.get(v, keyIntoClause); d.present(into) {
			w.st.SelectInto = true
			w.relation(d.get(into, keyIntoRel), RoleWrite)
		}
		return w.fields(mi, v, keyWithClause, keyIntoClause)
	case kindDML:
		if err := w.with(d.get(v, keyWithClause)); err != nil {
			return err
		}
		w.relation(d.get(v, keyRelation), RoleWrite)
		return w.fields(mi, v, keyWithClause, keyRelation)
	case kindCopy:
		role := RoleRead
		if d.truthy(d.get(v, keyIsFrom)) {
			role = RoleWrite
		}
		w.relation(d.get(v, keyRelation), role)
		return w.fields(mi, v, keyRelation, "")
	}
	return w.fields(mi, v, "", "")
}

// fields walks every message-typed field of the object v except skip1 and
// skip2, in document order (which is the descriptor's field order).
func (w *walker) fields(mi *msgInfo, v int32, skip1, skip2 string) error {
	d := w.d
	for k := v + 1; k < d.vals[v].next; k = d.vals[k+1].next {
		key := d.raw(k)
		f, ok := mi.fields[key]
		if !ok {
			return jsonErr("unknown field %s.%s", mi.typeName, key)
		}
		val := k + 1
		if f.msg == nil {
			// A scalar, enum or list of them: nothing to find, but an
			// object here would be a subtree the walker cannot place.
			for i := val; i < d.vals[val].next; i++ {
				if d.vals[i].kind == jObject {
					return jsonErr("object in scalar field %s.%s", mi.typeName, key)
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
		switch d.vals[val].kind {
		case jNull:
			continue
		case jArray:
		default:
			return jsonErr("list field %s.%s is not an array", mi.typeName, key)
		}
		for e := val + 1; e < d.vals[val].next; e = d.vals[e].next {
			// IntList and OidList items are bare numbers in the JSON.
			if d.vals[e].kind == jNumber {
				continue
			}
			if err := w.msg(f.msg, e); err != nil {
				return err
			}
		}
	}
	return nil
}
