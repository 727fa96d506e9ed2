package policy_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/egressd/egressd/policy"
)

// reasonSource is code that hands reasons to the records of some kinds:
// a file, or every file of a directory that no other entry names.
type reasonSource struct {
	path    string
	refuses []policy.Kind // decisions its reasons can deny
	ends    []policy.Kind // allowed requests its reasons can end
}

var (
	entries  = []policy.Kind{policy.KindHTTP, policy.KindConnect, policy.KindRedirect, policy.KindDNS, policy.KindSQL}
	requests = []policy.Kind{policy.KindHTTP, policy.KindConnect, policy.KindRedirect}
	dials    = []policy.Kind{policy.KindHTTP, policy.KindConnect}
)

// reasonSources are the code paths of each kind. The resolver and the
// dialer serve the DNS server and the dials of the proxy and the gate; the
// floor checks every entry point's destinations.
var reasonSources = []reasonSource{
	{path: "../dnsguard", refuses: []policy.Kind{policy.KindDNS}},
	{path: "../dnsguard/resolver.go", refuses: []policy.Kind{policy.KindDNS, policy.KindSQL}, ends: dials},
	{path: "../dnsguard/dialer.go", refuses: []policy.Kind{policy.KindSQL}, ends: dials},
	{path: "../dnsguard/floor.go", refuses: entries, ends: dials},
	{path: "../proxy", refuses: requests, ends: dials},
	{path: "../proxy/broker", refuses: []policy.Kind{policy.KindHTTP}},
	{path: "../proxy/pggate", refuses: []policy.Kind{policy.KindSQL}},
	{path: "sqlfacts", refuses: []policy.Kind{policy.KindSQL}},
	{path: "engine.go", refuses: entries},
	{path: "index.go", refuses: requests},
	{path: "host.go", refuses: requests},
	{path: "predial.go", refuses: requests},
	{path: "connect.go", refuses: []policy.Kind{policy.KindConnect}},
	{path: "url.go", refuses: []policy.Kind{policy.KindHTTP, policy.KindRedirect}},
	{path: "path.go", refuses: []policy.Kind{policy.KindHTTP, policy.KindRedirect}},
}

// answeredAllowed are reasons an entry point records with an allow, not a
// deny: DNS answers an allowed name without addresses empty.
var answeredAllowed = map[policy.Reason]policy.Kind{policy.ReasonDNSNoAddress: policy.KindDNS}

// TestReasonKindsCoverCode: every reason a code path names is one the
// reason table says the path's kinds can be denied or ended with, so the
// metrics zero-initialise its series. client_closed is exempt: a
// completion error, not a refusal, whose deny (a decision abandoned by its
// caller) is counted on first use.
func TestReasonKindsCoverCode(t *testing.T) {
	byName := map[string]policy.Reason{}
	for r, name := range reasonConstants(t) {
		byName[name] = r
	}
	files := map[string]reasonSource{}
	for _, src := range reasonSources {
		if strings.HasSuffix(src.path, ".go") {
			files[src.path] = src
			continue
		}
		names, err := filepath.Glob(filepath.Join(src.path, "*.go"))
		if err != nil || len(names) == 0 {
			t.Fatalf("no Go files in %s (%v)", src.path, err)
		}
		for _, n := range names {
			if _, named := files[n]; !named && !strings.HasSuffix(n, "_test.go") {
				files[n] = src
			}
		}
	}
	for _, src := range reasonSources {
		if _, err := os.Stat(src.path); err != nil {
			t.Errorf("source %s: %v", src.path, err)
		}
	}
	for path, src := range files {
		for _, name := range reasonNames(t, path) {
			r, ok := byName[name]
			if !ok || r.Class() == policy.ClassClient || answeredAllowed[r] != 0 && inKinds(answeredAllowed[r], src.refuses) {
				continue
			}
			if !possibleIn(r, src) {
				t.Errorf("%s names %s, which the reason table says none of its kinds (refuses %v, ends %v) can carry", path, name, src.refuses, src.ends)
			}
		}
	}
}

func possibleIn(r policy.Reason, src reasonSource) bool {
	for _, k := range src.refuses {
		if r.Refuses(k) {
			return true
		}
	}
	for _, k := range src.ends {
		if r.Ends(k) {
			return true
		}
	}
	return false
}

func inKinds(k policy.Kind, ks []policy.Kind) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

// reasonNames lists the Reason… identifiers the file at path uses:
// policy.ReasonX outside package policy, ReasonX inside it.
func reasonNames(t *testing.T, path string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.SelectorExpr:
			if id, ok := x.X.(*ast.Ident); ok && id.Name == "policy" && strings.HasPrefix(x.Sel.Name, "Reason") {
				names = append(names, x.Sel.Name)
			}
			return false
		case *ast.Ident:
			if f.Name.Name == "policy" && strings.HasPrefix(x.Name, "Reason") {
				names = append(names, x.Name)
			}
		}
		return true
	})
	return names
}
