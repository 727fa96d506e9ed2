package policy

import (
	"cmp"
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"
)

// BodyScope is a host and port whose requests a rule deciding on the body
// may apply to, so the proxy reads their bodies before deciding.
type BodyScope struct {
	// Host is a literal a rule compares input.host with.
	Host string
	// Port is a literal a rule compares input.port with; 0 is any port.
	Port int
}

// bodyInputKeys are the input keys that hold facts of a request's body.
var bodyInputKeys = map[ast.String]bool{"body": true, "mcp": true, "llm": true}

// bodyScopes finds, from the parsed modules, where a rule may decide on a
// request's body: the host and port pairs of every rule, function or else
// clause of a production module (not *_test.rego) that refers to
// input.body, input.mcp or input.llm, or to input as a whole (passed to a
// function, assigned, indexed by a variable), which may reach them, or
// replaces any part of input with `with`.
//
// Such a rule is scoped by the literals its own body compares input.host
// and input.port with, in expressions that are neither negated nor under
// `with`: `input.host == "a"` (either side; `=` too) and `input.host in
// {"a", "b"}` (a set or array of literals); several such expressions
// intersect. A rule referring to the body without a host literal makes
// anyHost true: every request is read.
//
// This is sound because a Rego body is a conjunction: where the host check
// fails, the rule is undefined whatever the body says, and so is every
// rule that uses it. That is also why rules a referring rule uses are not
// followed: each one that refers to the body is scoped on its own. What it
// does not see is a host check it cannot read as a literal (through a
// variable, data, a helper rule or `or`); such a rule counts as unscoped,
// which costs reading more bodies, never deciding without one.
func bodyScopes(modules map[string]*ast.Module) (scopes []BodyScope, anyHost bool) {
	for name, m := range modules {
		if isTestModule(name) {
			continue
		}
		s := newRefScan(m)
		for _, rule := range m.Rules {
			for r := rule; r != nil; r = r.Else {
				if !s.refersToBody(r) {
					continue
				}
				hosts, ports := s.scope(r.Body)
				if hosts == nil {
					anyHost = true
					continue
				}
				for _, h := range hosts {
					if ports == nil {
						scopes = append(scopes, BodyScope{Host: h})
					}
					for _, p := range ports {
						scopes = append(scopes, BodyScope{Host: h, Port: p})
					}
				}
			}
		}
	}
	slices.SortFunc(scopes, func(a, b BodyScope) int {
		return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(a.Port, b.Port))
	})
	return slices.Compact(scopes), anyHost
}

// refScan knows the names that stand for input in one module: input
// itself, and the aliases of its imports.
type refScan struct {
	// whole are the names of input as a whole; body those of input.body,
	// input.mcp or input.llm.
	whole, body map[ast.Var]bool
}

func newRefScan(m *ast.Module) *refScan {
	s := &refScan{whole: map[ast.Var]bool{ast.InputRootDocument.Value.(ast.Var): true}, body: map[ast.Var]bool{}}
	for _, imp := range m.Imports {
		ref, ok := imp.Path.Value.(ast.Ref)
		if !ok || !ref[0].Equal(ast.InputRootDocument) {
			continue
		}
		switch {
		case len(ref) == 1:
			s.whole[imp.Name()] = true
		case refersAt(ref[1]):
			s.body[imp.Name()] = true
		}
	}
	return s
}

// refersAt says whether input[k] may hold body facts: k is one of their
// keys, or not a string literal at all.
func refersAt(k *ast.Term) bool {
	key, ok := k.Value.(ast.String)
	return !ok || bodyInputKeys[key]
}

// refersToBody says whether r's head or body (not its else clauses, each
// its own rule here) may read body facts.
func (s *refScan) refersToBody(r *ast.Rule) bool {
	found := false
	var vis *ast.GenericVisitor
	vis = ast.NewGenericVisitor(func(x any) bool {
		if found {
			return true
		}
		if w, ok := x.(*ast.With); ok {
			// `with input.host as "a"` may run another rule's host-scoped
			// body check for every request, on this request's body.
			if ref, ok := w.Target.Value.(ast.Ref); ok {
				head, _ := ref[0].Value.(ast.Var)
				found = s.whole[head] || s.body[head]
			}
			return false
		}
		t, ok := x.(*ast.Term)
		if !ok {
			return false
		}
		switch v := t.Value.(type) {
		case ast.Var:
			found = s.whole[v] || s.body[v]
		case ast.Ref:
			if head, ok := v[0].Value.(ast.Var); ok {
				found = s.body[head] || s.whole[head] && (len(v) == 1 || refersAt(v[1]))
			}
			// The head is judged with the ref; a bare variable
			// elsewhere, such as input in data.x[input], is not.
			for _, sub := range v[1:] {
				vis.Walk(sub)
			}
			return true
		}
		return false
	})
	vis.Walk(r.Head)
	vis.Walk(r.Body)
	return found
}

// scope returns the hosts and ports body's literal comparisons allow; nil
// where nothing constrains them, empty where the constraints exclude every
// value.
func (s *refScan) scope(body ast.Body) (hosts []string, ports []int) {
	for _, e := range body {
		if e.Negated || len(e.With) > 0 {
			continue
		}
		field, lits := s.comparison(e)
		switch field {
		case "host":
			var hs []string
			for _, l := range lits {
				if h, ok := l.(ast.String); ok {
					hs = append(hs, string(h))
				}
			}
			hosts = intersect(hosts, hs)
		case "port":
			var ps []int
			for _, l := range lits {
				if p, ok := portOf(l); ok {
					ps = append(ps, p)
				}
			}
			ports = intersect(ports, ps)
		}
	}
	return hosts, ports
}

// comparison reads e as `input.F == literal` (either side, or `=`) or
// `input.F in {literals}` and returns F and the literals; "" otherwise.
func (s *refScan) comparison(e *ast.Expr) (ast.String, []ast.Value) {
	terms, ok := e.Terms.([]*ast.Term)
	if !ok || len(terms) != 3 {
		return "", nil
	}
	op, ok := terms[0].Value.(ast.Ref)
	if !ok {
		return "", nil
	}
	a, b := terms[1], terms[2]
	switch {
	case op.Equal(ast.Equal.Ref()), op.Equal(ast.Equality.Ref()):
		if s.field(a) == "" {
			a, b = b, a
		}
		if f := s.field(a); f != "" && ast.IsScalar(b.Value) {
			return f, []ast.Value{b.Value}
		}
	case op.Equal(ast.Member.Ref()):
		f := s.field(a)
		if f == "" {
			return "", nil
		}
		var elems []*ast.Term
		switch c := b.Value.(type) {
		case ast.Set:
			elems = c.Slice()
		case *ast.Array:
			for i := range c.Len() {
				elems = append(elems, c.Elem(i))
			}
		default:
			return "", nil
		}
		lits := make([]ast.Value, 0, len(elems))
		for _, el := range elems {
			if !ast.IsScalar(el.Value) {
				return "", nil
			}
			lits = append(lits, el.Value)
		}
		return f, lits
	}
	return "", nil
}

// field returns "host" or "port" when t is input.host or input.port.
func (s *refScan) field(t *ast.Term) ast.String {
	ref, ok := t.Value.(ast.Ref)
	if !ok || len(ref) != 2 {
		return ""
	}
	head, ok := ref[0].Value.(ast.Var)
	if !ok || !s.whole[head] {
		return ""
	}
	if k, ok := ref[1].Value.(ast.String); ok && (k == "host" || k == "port") {
		return k
	}
	return ""
}

// portOf is the port a number literal equals in Rego, which compares
// numbers by value (443.0 == 443).
func portOf(v ast.Value) (int, bool) {
	n, ok := v.(ast.Number)
	if !ok {
		return 0, false
	}
	f, ok := n.Float64()
	if !ok || f != float64(int(f)) || f < 1 || f > 65535 {
		return 0, false
	}
	return int(f), true
}

// intersect narrows have (nil: unconstrained) to the values also in add.
func intersect[T comparable](have, add []T) []T {
	if add == nil {
		add = []T{}
	}
	if have == nil {
		return add
	}
	out := []T{}
	for _, v := range have {
		if slices.Contains(add, v) {
			out = append(out, v)
		}
	}
	return out
}
