package policy

import (
	"net"
	"strings"

	"github.com/gobwas/glob"
	"github.com/open-policy-agent/opa/v1/ast"
)

// viewIndex is the Go half of the rule index. For each HTTP or CONNECT
// request it picks the rule views whose hosts match the request's host
// (the name, "*.<suffix>" of a parent domain, the IP, a CIDR holding it)
// and, for HTTP, whose path globs match the decoded path, and inserts them
// as input.views, in view order. Rego then checks only port, identity and
// method on a handful of views: looking keys up in data and calling
// glob.match per pattern cost more than the rest of an evaluation, and OPA
// keeps only 100 compiled globs process-wide, so a large bundle would
// recompile its globs on every request.
type viewIndex struct {
	views []*ast.Term
	// paths are each view's compiled globs ("**" when the rule has
	// none). A pattern that does not compile is left out: glob.match is
	// undefined for it, so it never matched.
	paths [][]*glob.Pattern
	hosts map[string][]int // keyed like data.rule_index.hosts
	cidrs []cidrViews
}

type cidrViews struct {
	cidr  string
	net   *net.IPNet
	views []int
}

func newViewIndex(views []*ast.Term, paths [][]string) *viewIndex {
	x := &viewIndex{views: views, paths: make([][]*glob.Pattern, len(views)), hosts: map[string][]int{}}
	for v, ps := range paths {
		for _, p := range ps {
			// The same library and separator as glob.match(p, ["/"], path).
			if g, err := glob.Compile(p, '/'); err == nil {
				x.paths[v] = append(x.paths[v], g)
			}
		}
	}
	return x
}

// addHost records that view v matches host h as written in a rule.
func (x *viewIndex) addHost(h string, v int) {
	if !strings.Contains(h, "/") {
		x.hosts[h] = append(x.hosts[h], v)
		return
	}
	for i := range x.cidrs {
		if x.cidrs[i].cidr == h {
			x.cidrs[i].views = append(x.cidrs[i].views, v)
			return
		}
	}
	// validate accepted h as a canonical CIDR, which net.ParseCIDR reads
	// as net.cidr_contains does.
	if _, n, err := net.ParseCIDR(h); err == nil {
		x.cidrs = append(x.cidrs, cidrViews{cidr: h, net: n, views: []int{v}})
	}
}

// termViews is input.views.
var termViews = ast.StringTerm("views")

// addTo inserts input.views for HTTP and CONNECT facts; other entry points
// do not read it.
func (x *viewIndex) addTo(in ast.Object, facts Facts) {
	switch f := facts.(type) {
	case *URLFacts:
		x.add(in, f.Host, f.IP.IsValid(), f.PathDecoded, true)
	case *ConnectFacts:
		x.add(in, f.Host, f.IP.IsValid(), "", false)
	}
}

func (x *viewIndex) add(in ast.Object, host string, isIP bool, path string, matchPath bool) {
	var stack [16]int
	found := stack[:0]
	found = append(found, x.hosts[host]...)
	if isIP {
		// As net.cidr_contains(cidr, input.ip) reads it.
		if ip := net.ParseIP(host); ip != nil {
			for i := range x.cidrs {
				if x.cidrs[i].net.Contains(ip) {
					found = append(found, x.cidrs[i].views...)
				}
			}
		}
	} else {
		var kb [maxHost + 1]byte
		for i := 0; i < len(host); i++ {
			if host[i] == '.' {
				key := append(append(kb[:0], '*'), host[i:]...)
				found = append(found, x.hosts[string(key)]...)
			}
		}
	}
	sortInts(found)
	terms := make([]*ast.Term, 0, len(found))
	for i, v := range found {
		if (i > 0 && v == found[i-1]) || (matchPath && !x.pathMatches(v, path)) {
			continue
		}
		terms = append(terms, x.views[v])
	}
	in.Insert(termViews, ast.ArrayTerm(terms...))
}

func (x *viewIndex) pathMatches(v int, path string) bool {
	for _, g := range x.paths[v] {
		if g.Match(path) {
			return true
		}
	}
	return false
}

func sortInts(s []int) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
