package policy

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"golang.org/x/net/publicsuffix"
)

// Candidate groups: the order the policy tries views in. A view whose
// body conditions refuse the request goes ahead of every other (see
// viewIndex.add), and rules missing on host come last.
const (
	groupBodyRefused = iota
	groupHost
	groupNearMiss
)

// explainRequest lists the candidate views of an http or redirect
// request: host from the index lookup, path from the glob matchers, body
// from the rule's request keys (the functions input.views is built
// with), port, method and identity from the view's fields as Rego reads
// them.
func (x *viewIndex) explainRequest(f *URLFacts, id Identity) []candidate {
	var out []candidate
	pm := pathMatcher{x: x, path: f.PathDecoded}
	x.eachCandidate(f.Host, f.IP, func(v int, hostOK bool) {
		c, view := x.candidate(v, hostOK, f.Host, f.IP), x.view(v)
		c.add(portCondition(view, f.Port))
		c.add(setCondition("method", view, "methods", "any_method", f.Method))
		c.add(x.pathCondition(v, &pm))
		c.add(setCondition("identity", view, "identities", "any_identity", id.ID))
		if !c.settle(hostOK) {
			return
		}
		c.Verdict = viewDecision(x.views[v])
		if o := x.opts[v]; o != nil && (o.MCP != nil || o.LLM != nil) {
			reason := f.bodyRefusal(o)
			c.add(bodyCondition(o, f, reason))
			if reason != "" {
				c.Verdict = viewDecision(x.bodyDenied[v][reason])
				if hostOK && pm.matches(v) {
					c.group = groupBodyRefused
				}
			}
		}
		out = append(out, c)
	})
	return out
}

// explainConnect lists the candidate views of a CONNECT: host, port,
// whether the view decides a tunnel at all (deny, host-wide or inspect),
// identity.
func (x *viewIndex) explainConnect(f *ConnectFacts, id Identity) []candidate {
	var out []candidate
	x.eachCandidate(f.Host, f.IP, func(v int, hostOK bool) {
		c, view := x.candidate(v, hostOK, f.Host, f.IP), x.view(v)
		c.add(portCondition(view, f.Port))
		c.add(tunnelCondition(view))
		c.add(setCondition("identity", view, "identities", "any_identity", id.ID))
		if !c.settle(hostOK) {
			return
		}
		c.Verdict = Decision{Allow: !c.Deny, Reason: ReasonAllowed, Rule: c.Rule, Inspect: viewBool(view, "inspect")}
		if c.Deny {
			c.Verdict.Reason = ReasonRuleDeny
		}
		out = append(out, c)
	})
	return out
}

// explainDNS lists the rules a DNS name could be answered for: host,
// action (deny rules are not consulted for names), identity, in data.rules
// order as the dns entry point takes the least.
func (x *viewIndex) explainDNS(name string, id Identity) []candidate {
	var out []candidate
	x.eachCandidate(name, netip.Addr{}, func(v int, hostOK bool) {
		c := x.candidate(v, hostOK, name, netip.Addr{})
		c.order = c.Index
		action := Condition{Name: "action", OK: !c.Deny, Got: "answer the name", Want: "allow"}
		if c.Deny {
			action.Want = "deny: deny rules are not consulted for names (the proxy enforces them)"
		}
		c.add(action)
		c.add(setCondition("identity", x.view(v), "identities", "any_identity", id.ID))
		if !c.settle(hostOK) {
			return
		}
		c.Verdict = Decision{Allow: true, Reason: ReasonAllowed, Rule: c.Rule}
		out = append(out, c)
	})
	return out
}

// eachCandidate calls fn for every view whose host matches (lookup, as
// input.views is built); when there is none, for every view with a host
// near it (see near), in view order. fn drops a view that misses on host unless host is all
// it misses on: the one rule a typo in a name kept from matching.
func (x *viewIndex) eachCandidate(host string, ip netip.Addr, fn func(v int, hostOK bool)) {
	var stack [16]int
	found := x.lookup(stack[:0], host, ip.IsValid())
	for _, v := range found {
		fn(v, true)
	}
	if ip.IsValid() || len(found) > 0 {
		return
	}
	reg, err := publicsuffix.EffectiveTLDPlusOne(host)
	if err != nil {
		return
	}
	for v := range x.views {
		for _, h := range x.ruleHosts[v] {
			if near(strings.TrimPrefix(h, "*."), host, reg) {
				fn(v, false)
				break
			}
		}
	}
}

// near says a rule's host name (without "*.") is host's parent or child
// under the registrable domain reg: the apex a "*.x" rule leaves out, a
// subdomain of an exact name, or its parent.
func near(name, host, reg string) bool {
	if r, err := publicsuffix.EffectiveTLDPlusOne(name); err != nil || r != reg {
		return false
	}
	return name == host || strings.HasSuffix(host, "."+name) || strings.HasSuffix(name, "."+host)
}

// candidate starts the Candidate of view v with its host condition.
func (x *viewIndex) candidate(v int, hostOK bool, host string, ip netip.Addr) candidate {
	view := x.view(v)
	id, _ := termString(view.Get(ast.StringTerm("id")))
	index, _ := termInt(view.Get(ast.StringTerm("index")))
	c := candidate{Candidate: Candidate{Rule: id, Index: index, Deny: viewBool(view, "deny")}, group: groupHost, order: v}
	if !hostOK {
		c.group = groupNearMiss
	}
	c.add(Condition{Name: "host", OK: hostOK, Got: host, Want: hostsWant(x.ruleHosts[v], host, ip)})
	return c
}

func (c *candidate) add(cond Condition) { c.Conditions = append(c.Conditions, cond) }

// settle sets Matches from the request-line conditions added so far and
// says whether to list c: a view listed for a near host is kept only
// when host (its first condition) is all it misses on.
func (c *candidate) settle(hostOK bool) bool {
	c.Matches = allOK(c.Conditions)
	return hostOK || allOK(c.Conditions[1:])
}

// view is view v's object.
func (x *viewIndex) view(v int) ast.Object { return x.views[v].Value.(ast.Object) }

// pathCondition is view v's path globs against the request's decoded
// path, matched as input.views are chosen.
func (x *viewIndex) pathCondition(v int, pm *pathMatcher) Condition {
	want := strings.Join(stringsOf(x.view(v).Get(ast.StringTerm("paths"))), " ")
	if x.fold[v] {
		want += ", in any case (a deny rule)"
	}
	return Condition{Name: "path", OK: pm.matches(v), Got: pm.path, Want: want}
}

// portCondition reads the view's ports as Rego does: r.ports[input.port].
func portCondition(view ast.Object, port uint16) Condition {
	ports, _ := view.Get(ast.StringTerm("ports")).Value.(ast.Set)
	var want []string
	ok := false
	if ports != nil {
		ok = ports.Contains(ast.IntNumberTerm(int(port)))
		sorted := ports.Sorted()
		for i := range sorted.Len() {
			want = append(want, sorted.Elem(i).String())
		}
	}
	return Condition{Name: "port", OK: ok, Got: strconv.Itoa(int(port)), Want: strings.Join(want, " ")}
}

// setCondition reads a {name: true} set with its any_ flag as Rego does:
// object.get(r.<set>, value, r.<anyKey>).
func setCondition(name string, view ast.Object, set, anyKey, value string) Condition {
	if viewBool(view, anyKey) {
		return Condition{Name: name, OK: true, Got: value, Want: "any"}
	}
	obj, _ := view.Get(ast.StringTerm(set)).Value.(ast.Object)
	var want []string
	ok := false
	if obj != nil {
		if t := obj.Get(ast.StringTerm(value)); t != nil {
			ok, _ = termBool(t)
		}
		for _, k := range obj.Keys() {
			if s, isStr := termString(k); isStr {
				want = append(want, s)
			}
		}
	}
	slices.Sort(want)
	return Condition{Name: name, OK: ok, Got: value, Want: strings.Join(want, " ")}
}

// tunnelCondition is the view's "tunnel": only a deny, a host-wide or an
// inspecting rule decides a CONNECT.
func tunnelCondition(view ast.Object) Condition {
	got := "methods or paths, not inspected"
	switch {
	case viewBool(view, "deny"):
		got = "a deny rule"
	case viewBool(view, "inspect"):
		got = "inspected"
	case viewBool(view, "host_wide"):
		got = "host-wide"
	}
	return Condition{Name: "tunnel", OK: viewBool(view, "tunnel"), Got: got, Want: "host-wide, inspected or deny"}
}

// bodyCondition says what the rule's mcp or llm key made of the body;
// reason is bodyRefusal's.
func bodyCondition(o *RuleOptions, f *URLFacts, reason Reason) Condition {
	c := Condition{Name: "body", OK: reason == "", Reason: reason}
	switch {
	case o.MCP != nil:
		c.Want = "mcp tools " + strings.Join(o.MCP.Tools, " ")
	case o.LLM != nil:
		c.Want = "llm " + o.LLM.API + " models " + strings.Join(o.LLM.Models, " ")
		if o.LLM.MaxOutputTokens > 0 {
			c.Want += ", max_output_tokens " + strconv.FormatInt(o.LLM.MaxOutputTokens, 10)
		}
	}
	b := f.Body
	switch {
	case !f.HasBody:
		c.Got = "no body"
	case b == nil:
		c.Got = "a body that was not read"
	case b.MCP != nil:
		var calls []string
		for i := range b.MCP.Calls {
			call := &b.MCP.Calls[i]
			s := call.Method
			if call.Tool != "" {
				s += " " + call.Tool
			}
			calls = append(calls, s)
		}
		c.Got = "mcp " + strings.Join(calls, ", ")
	case b.LLM != nil:
		c.Got = "model " + b.LLM.Model
		if b.LLM.HasMax {
			c.Got += ", max " + strconv.FormatInt(b.LLM.Reserve(), 10)
		}
	default:
		c.Got = strconv.Itoa(b.Size) + " bytes"
	}
	return c
}

// hostsWant lists a rule's hosts, those matching host first.
func hostsWant(hosts []string, host string, ip netip.Addr) string {
	var hit, rest []string
	for _, h := range hosts {
		if hostPatternMatches(h, host, ip) {
			hit = append(hit, h)
		} else {
			rest = append(rest, h)
		}
	}
	return strings.Join(append(hit, rest...), " ")
}

// hostPatternMatches is how a rule host reads host, for display only
// (which of a rule's hosts matched): whether a rule matches is the index
// lookup's answer. A test keeps the two agreeing.
func hostPatternMatches(pattern, host string, ip netip.Addr) bool {
	switch {
	case strings.Contains(pattern, "/"):
		p, err := netip.ParsePrefix(pattern)
		return err == nil && ip.IsValid() && p.Contains(ip)
	case strings.HasPrefix(pattern, "*."):
		return !ip.IsValid() && strings.HasSuffix(host, pattern[1:]) && len(host) > len(pattern)-1
	}
	return pattern == host
}

// viewDecision reads a view's "decision" term: what Rego returns when
// the view is the first match.
func viewDecision(t *ast.Term) Decision {
	d, _ := decodeDecision(t.Value.(ast.Object).Get(ast.StringTerm("decision")))
	return d
}

func viewBool(view ast.Object, key string) bool {
	b, _ := termBool(view.Get(ast.StringTerm(key)))
	return b
}

func termInt(t *ast.Term) (int, bool) {
	if t == nil {
		return 0, false
	}
	n, ok := t.Value.(ast.Number)
	if !ok {
		return 0, false
	}
	i, ok := n.Int()
	return i, ok
}

func allOK(cs []Condition) bool {
	for _, c := range cs {
		if !c.OK {
			return false
		}
	}
	return true
}
