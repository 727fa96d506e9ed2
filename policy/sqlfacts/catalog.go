package sqlfacts

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
)

// A function name alone does not say which function runs: PostgreSQL
// resolves an unqualified call over every schema of the search path and
// picks the best-matching overload, so `lower(42)` runs a user's
// public.lower(int) although pg_catalog.lower(text) exists; an operator
// or a cast runs the function it was created with. A Catalog is what one
// database defines outside pg_catalog, as the gate introspects it, and
// resolve adds to a statement's facts every such function a call,
// operator or cast can reach: a policy that allow-lists built-ins by name
// then sees a qualified, non-built-in function it has not allowed.

// CatalogOperator is an operator defined outside pg_catalog, or one whose
// function is.
type CatalogOperator struct {
	Schema string
	Name   string
	// Func is the function the operator calls.
	Func Function
}

// CatalogCast is a cast whose function is defined outside pg_catalog, or
// a function outside pg_catalog that a domain CHECK runs whenever a value
// of the target type is made: the target is the domain, or a composite
// type (a table's row type among them) or array with such a domain inside,
// since `'(5)'::t` and jsonb_populate_record(NULL::t, …) check t's
// columns' domains.
type CatalogCast struct {
	// Target is the target type's name (pg_type.typname).
	Target string
	Func   Function
	// Implicit is set for casts the server applies without a cast in the
	// text (castcontext implicit or assignment).
	Implicit bool
}

// CatalogRelation is a function outside pg_catalog that reading or
// writing a relation runs although no statement names it: one a view's
// query calls (or a view it reads, transitively), or a row-level security
// policy of the relation, or a domain CHECK of a type either uses.
type CatalogRelation struct {
	Schema string
	Name   string
	Func   Function
}

type relKey struct{ schema, name string }

// Catalog indexes one database's non-built-in functions, operators and
// casts. It is immutable; the zero of a *Catalog (nil) means "built-ins
// only".
type Catalog struct {
	// builtin are the names of pg_catalog's functions.
	builtin map[string]bool
	// funcs maps a function name to the schemas that define one.
	funcs map[string][]string
	// ops maps an operator name to its definitions outside pg_catalog.
	ops      map[string][]CatalogOperator
	casts    []CatalogCast
	targets  map[string]bool // the casts' target types
	implicit []Function
	// rels maps a relation to the functions it runs.
	rels   map[relKey][]Function
	digest string
}

// NewCatalog indexes a database's catalog: builtins are the names of the
// functions in pg_catalog, funcs the functions in every other schema; a
// cast's target may be a domain or composite type whose construction runs
// a domain CHECK (see CatalogCast), rels the functions relations run.
func NewCatalog(builtins []string, funcs []Function, ops []CatalogOperator, casts []CatalogCast, rels []CatalogRelation) *Catalog {
	c := &Catalog{builtin: map[string]bool{}, funcs: map[string][]string{}, ops: map[string][]CatalogOperator{}, targets: map[string]bool{}, rels: map[relKey][]Function{}}
	h := sha256.New()
	b := slices.Clone(builtins)
	slices.Sort(b)
	for _, n := range b {
		c.builtin[n] = true
		h.Write(appendStr(nil, n))
	}
	fs := slices.Clone(funcs)
	slices.SortFunc(fs, func(a, b Function) int { return strings.Compare(a.Schema+"\x00"+a.Name, b.Schema+"\x00"+b.Name) })
	h.Write([]byte{'f'})
	for _, f := range fs {
		if !slices.Contains(c.funcs[f.Name], f.Schema) {
			c.funcs[f.Name] = append(c.funcs[f.Name], f.Schema)
		}
		h.Write(appendStr(appendStr(nil, f.Schema), f.Name))
	}
	sorted := slices.Clone(ops)
	slices.SortFunc(sorted, func(a, b CatalogOperator) int {
		return strings.Compare(a.Schema+"\x00"+a.Name+"\x00"+a.Func.Schema+"\x00"+a.Func.Name, b.Schema+"\x00"+b.Name+"\x00"+b.Func.Schema+"\x00"+b.Func.Name)
	})
	h.Write([]byte{'o'})
	for _, o := range sorted {
		c.ops[o.Name] = append(c.ops[o.Name], o)
		h.Write(appendStr(appendStr(appendStr(appendStr(nil, o.Schema), o.Name), o.Func.Schema), o.Func.Name))
	}
	c.casts = slices.Clone(casts)
	slices.SortFunc(c.casts, func(a, b CatalogCast) int {
		return strings.Compare(a.Target+"\x00"+a.Func.Schema+"\x00"+a.Func.Name, b.Target+"\x00"+b.Func.Schema+"\x00"+b.Func.Name)
	})
	h.Write([]byte{'c'})
	for _, k := range c.casts {
		h.Write(appendStr(appendStr(appendStr(nil, k.Target), k.Func.Schema), k.Func.Name))
		h.Write([]byte{b2b(k.Implicit)})
		c.targets[k.Target] = true
		if k.Implicit && !slices.Contains(c.implicit, k.Func) {
			c.implicit = append(c.implicit, k.Func)
		}
	}
	rs := slices.Clone(rels)
	slices.SortFunc(rs, func(a, b CatalogRelation) int {
		return strings.Compare(a.Schema+"\x00"+a.Name+"\x00"+a.Func.Schema+"\x00"+a.Func.Name, b.Schema+"\x00"+b.Name+"\x00"+b.Func.Schema+"\x00"+b.Func.Name)
	})
	h.Write([]byte{'r'})
	for _, r := range rs {
		h.Write(appendStr(appendStr(appendStr(appendStr(nil, r.Schema), r.Name), r.Func.Schema), r.Func.Name))
		k := relKey{r.Schema, r.Name}
		if !slices.Contains(c.rels[k], r.Func) {
			c.rels[k] = append(c.rels[k], r.Func)
		}
	}
	c.digest = hex.EncodeToString(h.Sum(nil)[:16])
	return c
}

// Digest identifies the catalog's content: facts, and so verdicts, depend
// on it. The nil catalog's digest is "".
func (c *Catalog) Digest() string {
	if c == nil {
		return ""
	}
	return c.digest
}

// castTarget reports whether a user cast targets the type named name.
func (c *Catalog) castTarget(name string) bool {
	return c != nil && c.targets[name]
}

// Empty reports whether the catalog defines nothing outside pg_catalog.
func (c *Catalog) Empty() bool {
	return c == nil || len(c.funcs) == 0 && len(c.ops) == 0 && len(c.casts) == 0 && len(c.rels) == 0
}

// noCasts are the commands that evaluate no expression, so no implicit
// cast can run in them.
var noCasts = map[string]bool{
	"transaction": true, "set": true, "show": true, "listen": true, "unlisten": true,
	"deallocate": true, "discard": true, "close_portal": true,
}

// resolve adds to st (and its inner statement) every function outside
// pg_catalog that one of its calls, operators or casts can run, as seen
// with search path schema def. An unqualified call that only a
// non-built-in can satisfy is replaced by the qualified one: its bare
// name would otherwise read as the built-in of that name. A statement
// that reaches no such function costs no allocation.
func (c *Catalog) resolve(st *Statement, def string) {
	if c.Empty() {
		return
	}
	if st.Inner != nil {
		c.resolve(st.Inner, def)
	}
	var add []Function
	fns := st.Functions
	for i := 0; i < len(fns); i++ {
		f := fns[i]
		if f.Schema != "" {
			continue
		}
		user := slices.Contains(c.funcs[f.Name], def)
		if user {
			add = append(add, Function{Schema: def, Name: f.Name})
		}
		// `money(x)` with no function of that name is a cast.
		if c.targets[f.Name] {
			for _, k := range c.casts {
				if k.Target == f.Name {
					add = append(add, k.Func)
				}
			}
		}
		if user && !c.builtin[f.Name] {
			fns = slices.Delete(fns, i, i+1)
			i--
		}
	}
	for _, o := range st.Operators {
		if o.Schema == "pg_catalog" {
			// OPERATOR(pg_catalog.+) names the built-in.
			continue
		}
		schema := o.Schema
		if schema == "" {
			schema = def
		}
		for _, op := range c.ops[o.Name] {
			// pg_catalog is searched too for an unqualified name, and may
			// hold an operator a superuser gave a user function.
			if op.Schema == schema || o.Schema == "" && op.Schema == "pg_catalog" {
				add = append(add, op.Func)
			}
		}
	}
	// A view's query and a relation's row-level security policies run
	// for every statement that reads or writes it.
	if len(c.rels) > 0 {
		for _, r := range st.Relations {
			add = append(add, c.rels[relKey{r.Schema, r.Name}]...)
		}
	}
	for _, k := range c.casts {
		if slices.Contains(st.casts, k.Target) {
			add = append(add, k.Func)
		}
	}
	if !noCasts[st.Command] {
		add = append(add, c.implicit...)
	}
	for _, f := range add {
		if !slices.Contains(fns, f) {
			fns = append(fns, f)
		}
	}
	st.Functions = fns
}
