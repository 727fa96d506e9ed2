package policy

import (
	"net"
	"slices"
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
	// none; ruleSpec.validate has compiled each).
	paths [][]*glob.Pattern
	// fold marks the views whose globs match the ASCII-lower-cased path
	// (deny rules, see newViewIndex).
	fold  []bool
	hosts map[string][]int // keyed like data.rule_index.hosts
	// ruleHosts are each view's hosts as its rule lists them, for
	// Explain.
	ruleHosts [][]string
	cidrs     []cidrViews
	// opts are each view's RuleOptions (nil for a rule without request
	// keys), and byRule the same by rule id, for Decision.Options.
	opts   []*RuleOptions
	byRule map[string]*RuleOptions
	// bodyDenied are, for each view deciding on bodies, its stand-ins
	// by refusal (setBodyDenials).
	bodyDenied []map[Reason]*ast.Term
	// observe are the ids of the rules with "mode": "observe".
	observe map[string]bool
	// identities are the "identities" of each rule that lists any, by
	// rule id, for RuleIdentities.
	identities map[string][]string
}

type cidrViews struct {
	cidr  string
	net   *net.IPNet
	views []int
}

// newViewIndex compiles each view's path globs, "*" within one segment and
// "**" across any number, with two choices glob.match alone does not make:
//
//   - "/p/**" also matches "/p" itself: a rule for a tree covers its root,
//     so "/repos/*/*/**" needs no "/repos/*/*" beside it;
//   - paths match case-sensitively (RFC 3986 paths are), except in deny
//     rules, whose globs match in any ASCII case: an upstream that folds
//     case ("/ADMIN" served as "/admin") must not dodge a deny, while an
//     allow for "/public/**" must not open "/PUBLIC/…", which a
//     case-sensitive upstream serves as another resource.
func newViewIndex(views []*ast.Term, paths [][]string, fold []bool) *viewIndex {
	x := &viewIndex{views: views, paths: make([][]*glob.Pattern, len(views)), fold: fold, hosts: map[string][]int{},
		observe: map[string]bool{}, ruleHosts: make([][]string, len(views))}
	for v, ps := range paths {
		for _, p := range ps {
			if fold[v] {
				p = asciiLower(p)
			}
			x.compile(v, p)
			if root, ok := strings.CutSuffix(p, "/**"); ok && root != "" {
				x.compile(v, root)
			}
		}
	}
	return x
}

// compile adds glob p to view v, with the library and separator of
// glob.match(p, ["/"], path).
func (x *viewIndex) compile(v int, p string) {
	if g, err := glob.Compile(p, '/'); err == nil {
		x.paths[v] = append(x.paths[v], g)
	}
}

// addHost records that view v matches host h as written in a rule.
func (x *viewIndex) addHost(h string, v int) {
	x.ruleHosts[v] = append(x.ruleHosts[v], h)
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
		x.add(in, f.Host, f.IP.IsValid(), f.PathDecoded, f)
	case *ConnectFacts:
		x.add(in, f.Host, f.IP.IsValid(), "", nil)
	}
}

// add inserts the views matching host and, for a request (req not nil),
// its decoded path. A view whose body conditions refuse the request's body
// is replaced by its refusal and moved ahead of every other view: an
// unknown tool or model fails closed like an explicit deny, whatever other
// rule would allow the request line.
func (x *viewIndex) add(in ast.Object, host string, isIP bool, path string, req *URLFacts) {
	var stack [16]int
	found := x.lookup(stack[:0], host, isIP)
	terms := make([]*ast.Term, 0, len(found))
	var refused []*ast.Term
	pm := pathMatcher{x: x, path: path}
	for _, v := range found {
		if req != nil {
			if !pm.matches(v) {
				continue
			}
			if reason := req.bodyRefusal(x.opts[v]); reason != "" {
				refused = append(refused, x.bodyDenied[v][reason])
				continue
			}
		}
		terms = append(terms, x.views[v])
	}
	if refused != nil {
		terms = append(refused, terms...)
	}
	in.Insert(termViews, ast.ArrayTerm(terms...))
}

// lookup appends to found the views whose hosts match host, in view
// order, each once.
func (x *viewIndex) lookup(found []int, host string, isIP bool) []int {
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
	return slices.Compact(found)
}

// pathMatcher matches one request's decoded path against views as
// input.views are chosen: case-sensitively for allow views; for deny
// views in any ASCII case and in the path's Windows form too. The folded
// forms are computed once, on the first deny view.
type pathMatcher struct {
	x                *viewIndex
	path, lower, win string
	folded           bool
}

func (m *pathMatcher) matches(v int) bool {
	if !m.x.fold[v] {
		return m.x.pathMatches(v, m.path)
	}
	if !m.folded {
		m.lower, m.folded = asciiLower(m.path), true
		m.win = windowsForm(m.lower)
	}
	return m.x.pathMatches(v, m.lower) || (m.win != m.lower && m.x.pathMatches(v, m.win))
}

func (x *viewIndex) pathMatches(v int, path string) bool {
	for _, g := range x.paths[v] {
		if g.Match(path) {
			return true
		}
	}
	return false
}

// windowsForm is p as a Windows-backed server reads it: Win32 path
// normalization drops the trailing dots and spaces of a segment, so
// "/secret./x" and "/secret%20/x" (decoded) name /secret/x there, and a
// segment left empty by that is gone as "\\" collapses. Deny rules match
// this form as well as p itself; allow rules match p alone, so an allow is
// never widened. It allocates only when a segment ends in a dot or a space.
func windowsForm(p string) string {
	i := 0
	for i < len(p) && !endsSegment(p, i) {
		i++
	}
	if i == len(p) {
		return p
	}
	segs := strings.Split(p, "/")
	kept := segs[:0]
	for _, seg := range segs {
		t := strings.TrimRight(seg, ". ")
		if t == "" && seg != "" {
			continue
		}
		kept = append(kept, t)
	}
	if w := strings.Join(kept, "/"); w != "" {
		return w
	}
	return "/"
}

// endsSegment reports a dot or a space at p[i] that ends a segment of p.
func endsSegment(p string, i int) bool {
	return (p[i] == '.' || p[i] == ' ') && (i+1 == len(p) || p[i+1] == '/')
}

// asciiLower lower-cases ASCII letters only, so that no other byte of a
// path changes; it allocates only when there is an upper-case letter.
func asciiLower(s string) string {
	i := 0
	for i < len(s) && (s[i] < 'A' || s[i] > 'Z') {
		i++
	}
	if i == len(s) {
		return s
	}
	b := []byte(s)
	for ; i < len(b); i++ {
		if 'A' <= b[i] && b[i] <= 'Z' {
			b[i] += 'a' - 'A'
		}
	}
	return string(b)
}

func sortInts(s []int) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
