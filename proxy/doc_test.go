package proxy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mapPackages are the packages the doc's map may name, by the directory
// of each relative to this one.
var mapPackages = map[string]string{
	"proxy":    ".",
	"pggate":   "pggate",
	"dnsguard": filepath.Join("..", "dnsguard"),
	"policy":   filepath.Join("..", "policy"),
	"sqlfacts": filepath.Join("..", "policy", "sqlfacts"),
	"audit":    filepath.Join("..", "audit"),
	"broker":   "broker",
}

// mapName is a name in the map: pkg.Func, pkg.Type or pkg.Type.Method.
var mapName = regexp.MustCompile(`\b(proxy|pggate|dnsguard|policy|sqlfacts|audit|broker)\.([A-Za-z_]\w*)(?:\.([A-Za-z_]\w*))?`)

// declared is what one package declares: top-level functions and types,
// and methods (of concrete types and interfaces) as "Type.Method".
type declared map[string]bool

func declaredIn(t *testing.T, dir string) declared {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	d := declared{}
	fset := token.NewFileSet()
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", e.Name(), err)
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv == nil {
					d[decl.Name.Name] = true
					continue
				}
				typ := decl.Recv.List[0].Type
				if star, ok := typ.(*ast.StarExpr); ok {
					typ = star.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					d[id.Name+"."+decl.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					ts, ok := spec.(*ast.TypeSpec)
					if !ok {
						continue
					}
					d[ts.Name.Name] = true
					if it, ok := ts.Type.(*ast.InterfaceType); ok {
						for _, m := range it.Methods.List {
							for _, n := range m.Names {
								d[ts.Name.Name+"."+n.Name] = true
							}
						}
					}
				}
			}
		}
	}
	return d
}

// TestDocMapNamesExist keeps the package doc's map of the decision path
// true: every function it names exists, and it covers every entry point.
func TestDocMapNamesExist(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatalf("parse doc.go: %v", err)
	}
	if f.Doc == nil {
		t.Fatal("doc.go has no package doc")
	}
	decls := map[string]declared{}
	// A row starts with its entry point; its indented lines continue it.
	rows := map[string]int{}
	row := ""
	for _, line := range strings.Split(f.Doc.Text(), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			row = ""
			continue
		}
		switch fields[0] {
		case "HTTP", "CONNECT", "DNS", "SQL":
			row = fields[0]
		}
		names := mapName.FindAllStringSubmatch(line, -1)
		if row != "" {
			rows[row] += len(names)
		}
		for _, m := range names {
			pkg, name := m[1], m[2]
			if m[3] != "" {
				name += "." + m[3]
			}
			if decls[pkg] == nil {
				decls[pkg] = declaredIn(t, mapPackages[pkg])
			}
			if !decls[pkg][name] {
				t.Errorf("the package doc names %s, which package %s does not declare", m[0], pkg)
			}
		}
	}
	for _, entry := range []string{"HTTP", "CONNECT", "DNS", "SQL"} {
		// client bytes, identity, facts, policy, audit, act: at least six
		// names on each row.
		if rows[entry] < 6 {
			t.Errorf("the package doc's map row %s names %d functions; want the whole path (≥ 6)", entry, rows[entry])
		}
	}
}
