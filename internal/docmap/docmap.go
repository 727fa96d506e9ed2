// Package docmap holds a package doc's map of decision paths to the code it
// describes, for the tests of the packages whose docs carry one (proxy,
// cmd/egressd). Every name the doc writes must be declared, and every step
// of a path must be reached from a step before it in the module's call
// graph, so the map cannot keep a function that no longer runs where it
// says, nor skip one that does.
//
// A map is a run of rows in a code block of the doc, each starting with
// its label (HTTP, DNS, …) and continued by the lines below it up to the
// next label or the end of the block. A row is a chain of steps joined by "→"; each step names
// exactly one function outside parentheses, and the functions it names
// inside parentheses are ones that step calls on its way. Other words are
// prose.
//
// A step is reached from the step before it when that function calls it,
// directly or through functions the row does not name; a call through an
// interface reaches every method of the module that implements it. When
// the step before has returned (the next step is not reached from it), the
// step before that one is tried, and so on back to the row's first step: a
// path is a walk down the call stack and back up. A library function
// (goproxy's, net/http's) reaches a function of the module that the module
// hands to libraries: as a function value (a hook), or as a method of an
// interface declared outside the module that its type satisfies.
package docmap

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Step is one function of a path, and the functions written in
// parentheses after it.
type Step struct {
	Name  string
	Calls []string
}

// Row is one path of a map: its label and its steps in order.
type Row struct {
	Label string
	Steps []Step
}

// Doc is a package doc comment with its map.
type Doc struct {
	// Names are all the names the doc writes, in or out of the map.
	Names []string
	Rows  []Row
}

// ReadDoc reads the package doc of the Go file at path, and its map: the
// rows labelled with one of labels. pkgs are the package names the doc may
// write, as in "proxy.Server.ServeHTTP".
func ReadDoc(path string, labels []string, pkgs []string) (*Doc, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	if f.Doc == nil {
		return nil, fmt.Errorf("%s has no package doc", path)
	}
	nameRE := regexp.MustCompile(`\b(` + strings.Join(pkgs, "|") + `)\.[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?`)
	text := f.Doc.Text()
	d := &Doc{Names: nameRE.FindAllString(text, -1)}
	var row *strings.Builder
	var label string
	flush := func() error {
		if row == nil {
			return nil
		}
		steps, err := parseRow(row.String(), nameRE)
		if err != nil {
			return fmt.Errorf("row %s: %w", label, err)
		}
		d.Rows = append(d.Rows, Row{Label: label, Steps: steps})
		row = nil
		return nil
	}
	for line := range strings.SplitSeq(text, "\n") {
		fields := strings.Fields(line)
		switch {
		case len(fields) == 0 || !strings.HasPrefix(line, "\t"):
			// A map is a code block: prose ends it.
			if err := flush(); err != nil {
				return nil, err
			}
		case slices.Contains(labels, fields[0]):
			if err := flush(); err != nil {
				return nil, err
			}
			label, row = fields[0], &strings.Builder{}
			row.WriteString(strings.Join(fields[1:], " "))
		case row != nil:
			row.WriteString(" " + strings.Join(fields, " "))
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return d, nil
}

// parseRow splits a row at its arrows outside parentheses into steps.
func parseRow(text string, nameRE *regexp.Regexp) ([]Step, error) {
	var steps []Step
	depth, start := 0, 0
	segment := func(end int) error {
		seg := text[start:end]
		var main, calls []string
		for _, loc := range nameRE.FindAllStringIndex(seg, -1) {
			before, name := seg[:loc[0]], seg[loc[0]:loc[1]]
			if strings.Count(before, "(") > strings.Count(before, ")") {
				calls = append(calls, name)
			} else {
				main = append(main, name)
			}
		}
		if len(main) != 1 {
			return fmt.Errorf("step %q names %d functions outside parentheses; want 1", strings.TrimSpace(text[start:end]), len(main))
		}
		steps = append(steps, Step{Name: main[0], Calls: calls})
		return nil
	}
	for i, r := range text {
		switch {
		case r == '(':
			depth++
		case r == ')':
			depth--
		case r == '→' && depth == 0:
			if err := segment(i); err != nil {
				return nil, err
			}
			start = i + len("→")
		}
	}
	if err := segment(len(text)); err != nil {
		return nil, err
	}
	return steps, nil
}

// Module is the call graph of the module's packages, type-checked from
// source; the packages they import from outside the module come from the
// go command's export data.
type Module struct {
	// byName are the packages a doc may name, by the name it writes.
	byName map[string]*types.Package
	local  map[*types.Package]bool
	// calls are the functions each function of the module calls or takes
	// as a value, function literals in its body included, in source order.
	calls map[*types.Func][]use
	// handed are the module's functions used as values: hooks a library
	// may call.
	handed map[*types.Func]bool
	// outside are the interfaces of the libraries the module imports: a
	// library may call their methods on a value the module hands it.
	outside []*types.Interface
	// impls caches the module's methods implementing an interface method.
	impls map[*types.Func][]*types.Func
}

type listed struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Export     string
	Module     *struct{ Main bool }
}

// Load type-checks the module packages named (by import path) and their
// module dependencies. names maps each package name a doc writes to its
// import path.
func Load(names map[string]string) (*Module, error) {
	paths := make([]string, 0, len(names))
	for _, p := range names {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var stderr bytes.Buffer
	cmd := exec.Command("go", append([]string{"list", "-export", "-deps", "-json=ImportPath,Dir,GoFiles,Export,Module"}, paths...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w: %s", err, stderr.String())
	}
	fset := token.NewFileSet()
	exports := map[string]string{}
	var local []listed
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("decode go list: %w", err)
		}
		if p.Module != nil && p.Module.Main {
			local = append(local, p)
		} else {
			exports[p.ImportPath] = p.Export
		}
	}
	gc := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	m := &Module{byName: map[string]*types.Package{}, local: map[*types.Package]bool{},
		calls: map[*types.Func][]use{}, handed: map[*types.Func]bool{},
		impls: map[*types.Func][]*types.Func{}}
	checked := map[string]*types.Package{}
	imp := importerFunc(func(path string) (*types.Package, error) {
		if p, ok := checked[path]; ok {
			return p, nil
		}
		return gc.Import(path)
	})
	// go list -deps lists a package after its dependencies.
	for _, lp := range local {
		var files []*ast.File
		for _, name := range lp.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(lp.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				return nil, fmt.Errorf("parse: %w", err)
			}
			files = append(files, f)
		}
		info := &types.Info{Defs: map[*ast.Ident]types.Object{}, Uses: map[*ast.Ident]types.Object{},
			Types: map[ast.Expr]types.TypeAndValue{}}
		pkg, err := (&types.Config{Importer: imp}).Check(lp.ImportPath, fset, files, info)
		if err != nil {
			return nil, fmt.Errorf("type-check %s: %w", lp.ImportPath, err)
		}
		checked[lp.ImportPath] = pkg
		m.local[pkg] = true
		m.addCalls(files, info, pkg)
	}
	m.outside = outsideInterfaces(checked)
	for name, path := range names {
		p := checked[path]
		if p == nil {
			// A library a doc names (goproxy): imported by a module package.
			if p, err = gc.Import(path); err != nil {
				return nil, fmt.Errorf("import %s: %w", path, err)
			}
		}
		m.byName[name] = p
	}
	return m, nil
}

// outsideInterfaces are the exported interfaces of the packages outside the
// module that the module imports.
func outsideInterfaces(local map[string]*types.Package) []*types.Interface {
	seen := map[*types.Package]bool{}
	var out []*types.Interface
	for _, p := range local {
		for _, imp := range p.Imports() {
			if local[imp.Path()] != nil || seen[imp] {
				continue
			}
			seen[imp] = true
			for _, name := range imp.Scope().Names() {
				if tn, ok := imp.Scope().Lookup(name).(*types.TypeName); ok && tn.Exported() && types.IsInterface(tn.Type()) {
					if iface, ok := tn.Type().Underlying().(*types.Interface); ok {
						out = append(out, iface)
					}
				}
			}
		}
	}
	return out
}

// use is a function a function's body uses, and where.
type use struct {
	fn  *types.Func
	pos token.Pos
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

// addCalls records the functions each function declared in files uses.
func (m *Module) addCalls(files []*ast.File, info *types.Info, pkg *types.Package) {
	for _, f := range files {
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			fn, ok := info.Defs[fd.Name].(*types.Func)
			if !ok {
				continue
			}
			called := map[*ast.Ident]bool{}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok {
					switch fun := ast.Unparen(c.Fun).(type) {
					case *ast.Ident:
						called[fun] = true
					case *ast.SelectorExpr:
						called[fun.Sel] = true
					}
				}
				id, ok := n.(*ast.Ident)
				if !ok {
					return true
				}
				if callee, ok := info.Uses[id].(*types.Func); ok {
					m.calls[fn] = append(m.calls[fn], use{callee.Origin(), id.Pos()})
					if !called[id] && callee.Pkg() == pkg {
						m.handed[callee.Origin()] = true
					}
				}
				return true
			})
		}
	}
}

// Lookup is the function, method or type a doc's name denotes, or nil.
func (m *Module) Lookup(name string) types.Object {
	parts := strings.Split(name, ".")
	p := m.byName[parts[0]]
	if p == nil {
		return nil
	}
	obj := p.Scope().Lookup(parts[1])
	if obj == nil || len(parts) == 2 {
		return obj
	}
	tn, ok := obj.(*types.TypeName)
	if !ok {
		return nil
	}
	method, _, _ := types.LookupFieldOrMethod(tn.Type(), true, p, parts[2])
	if _, ok := method.(*types.Func); !ok {
		return nil
	}
	return method
}

// Check reports the names of d that denote nothing, and the steps of its
// rows that are not reached as the package doc says.
func (m *Module) Check(d *Doc) []error {
	var errs []error
	for _, n := range d.Names {
		if m.Lookup(n) == nil {
			errs = append(errs, fmt.Errorf("the doc names %s, which is not declared", n))
		}
	}
	for _, row := range d.Rows {
		errs = append(errs, m.checkRow(row)...)
	}
	return errs
}

func (m *Module) checkRow(row Row) []error {
	var errs []error
	fn := func(name string) *types.Func {
		f, _ := m.Lookup(name).(*types.Func)
		if f == nil {
			errs = append(errs, fmt.Errorf("row %s: %s is not a function", row.Label, name))
		}
		return f
	}
	named := map[*types.Func]bool{}
	for _, s := range row.Steps {
		if f := fn(s.Name); f != nil {
			named[f] = true
		}
		for _, c := range s.Calls {
			if f := fn(c); f != nil {
				named[f] = true
			}
		}
	}
	if len(errs) > 0 {
		return errs
	}
	// A frame is a step on the walk's stack, and where in its body the
	// call to its latest callee is: the next callee comes at or after it.
	type frame struct {
		fn    *types.Func
		after token.Pos
	}
	var stack []frame
	for i, s := range row.Steps {
		f := fn(s.Name)
		for i > 0 && len(stack) > 0 {
			top := &stack[len(stack)-1]
			if !m.local[top.fn.Pkg()] {
				if m.local[f.Pkg()] && m.handedToLibrary(f) {
					break
				}
			} else if at, ok := m.reachedAt(top.fn, f, named, top.after); ok {
				top.after = at
				break
			}
			stack = stack[:len(stack)-1]
		}
		if i > 0 && len(stack) == 0 {
			errs = append(errs, fmt.Errorf("row %s: %s is not reached from %s, nor from a step before it after its call there", row.Label, s.Name, row.Steps[i-1].Name))
			return errs
		}
		for _, c := range s.Calls {
			if _, ok := m.reachedAt(f, fn(c), named, token.NoPos); !ok {
				errs = append(errs, fmt.Errorf("row %s: %s does not reach %s", row.Label, s.Name, c))
			}
		}
		stack = append(stack, frame{fn: f})
	}
	return errs
}

// reachedAt reports whether from reaches to, directly or through functions
// that are not in named, by a use in its body at or after after, and the
// first such use.
func (m *Module) reachedAt(from, to *types.Func, named map[*types.Func]bool, after token.Pos) (token.Pos, bool) {
	for _, u := range m.calls[from] {
		if u.pos < after {
			continue
		}
		for _, c := range m.expand(u.fn) {
			if c == to || m.implements(to, c) || (!named[c] && m.reaches(c, to, named)) {
				return u.pos, true
			}
		}
	}
	return token.NoPos, false
}

// reaches reports whether from calls to, directly or through functions
// that are not in named.
func (m *Module) reaches(from, to *types.Func, named map[*types.Func]bool) bool {
	seen := map[*types.Func]bool{from: true}
	queue := []*types.Func{from}
	for len(queue) > 0 {
		f := queue[0]
		queue = queue[1:]
		for _, u := range m.calls[f] {
			for _, c := range m.expand(u.fn) {
				if c == to || m.implements(to, c) {
					return true
				}
				if !seen[c] && !named[c] {
					seen[c] = true
					queue = append(queue, c)
				}
			}
		}
	}
	return false
}

// expand is f and, when f is an interface method, the module's methods
// that implement it.
func (m *Module) expand(f *types.Func) []*types.Func {
	if !isInterfaceMethod(f) {
		return []*types.Func{f}
	}
	impls, ok := m.impls[f]
	if !ok {
		impls = []*types.Func{f}
		for g := range m.calls {
			if m.implements(g, f) {
				impls = append(impls, g)
			}
		}
		m.impls[f] = impls
	}
	return impls
}

// implements reports whether f is a concrete method that implements the
// interface method im.
func (m *Module) implements(f, im *types.Func) bool {
	if !isInterfaceMethod(im) || isInterfaceMethod(f) || f.Name() != im.Name() {
		return false
	}
	recv := f.Signature().Recv()
	if recv == nil {
		return false
	}
	iface, ok := im.Signature().Recv().Type().Underlying().(*types.Interface)
	if !ok {
		return false
	}
	t := recv.Type()
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	return types.Implements(types.NewPointer(t), iface)
}

func isInterfaceMethod(f *types.Func) bool {
	recv := f.Signature().Recv()
	return recv != nil && types.IsInterface(recv.Type())
}

// handedToLibrary reports whether a library may call f: the module uses it
// as a value, or f is a method of an interface of a library the module
// imports, which f's type satisfies.
func (m *Module) handedToLibrary(f *types.Func) bool {
	if m.handed[f] {
		return true
	}
	for _, iface := range m.outside {
		for i := range iface.NumMethods() {
			if m.implements(f, iface.Method(i)) {
				return true
			}
		}
	}
	return false
}

// Test holds the map in the package doc of file to the code: every name
// it writes is declared, each of labels has a row naming at least six
// functions (client bytes, identity, facts, policy, audit, act), and each
// step is reached as the package doc says. pkgs maps each package name the
// doc may write to its import path.
func Test(t testing.TB, file string, labels []string, pkgs map[string]string) {
	t.Helper()
	doc, err := ReadDoc(file, labels, slices.Sorted(maps.Keys(pkgs)))
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load(pkgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range m.Check(doc) {
		t.Error(err)
	}
	for _, label := range labels {
		n := 0
		for _, row := range doc.Rows {
			if row.Label == label {
				for _, s := range row.Steps {
					n += 1 + len(s.Calls)
				}
			}
		}
		if n < 6 {
			t.Errorf("the map's row %s names %d functions; want the whole path (≥ 6)", label, n)
		}
	}
}
