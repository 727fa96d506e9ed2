package policy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// explainRules overlap on purpose: exact, wildcard, IP and CIDR hosts,
// deny rules scoped by path, port and identity, methods, an inspected
// path rule beside a host-wide one, and a body rule beside a request-line
// rule on the same host.
const explainRules = `{"rules": [
  {"id": "a", "hosts": ["a.test", "*.w.test"], "ports": [80, 443], "methods": ["GET"], "paths": ["/x/**", "/y/*"]},
  {"id": "a-deny", "hosts": ["a.test"], "ports": [80], "paths": ["/x/secret/**"], "action": "deny"},
  {"id": "b", "hosts": ["b.test"], "ports": [80, 8080], "identities": ["alice"]},
  {"id": "b-post", "hosts": ["b.test"], "ports": [80], "methods": ["POST"], "paths": ["/up"]},
  {"id": "w-deny", "hosts": ["*.w.test"], "ports": [443], "action": "deny", "identities": ["bob"]},
  {"id": "ip", "hosts": ["10.1.2.3"], "ports": [80], "methods": ["GET"]},
  {"id": "net", "hosts": ["10.1.0.0/16"], "ports": [80]},
  {"id": "insp", "hosts": ["c.test"], "ports": [443], "inspect": true, "methods": ["GET"], "paths": ["/api/**"], "identities": ["alice"]},
  {"id": "c-wide", "hosts": ["c.test"], "ports": [443], "identities": ["alice", "bob"]},
  {"id": "mcp", "hosts": ["m.test"], "ports": [80], "mcp": {"tools": ["ok_*"]}},
  {"id": "m-get", "hosts": ["m.test"], "ports": [80], "methods": ["GET"]}
]}`

// explainBody refuses one tool on one host, as an operator's module.
const explainBody = `package egress.body

deny contains {"reason": "tool_not_here", "rule": "mcp"} if {
	input.host == "m.test"
	input.mcp.tool == "ok_but_not_here"
}
`

// explainer is a Decider that explains every decision, as check
// --explain's recorder does; last is the latest explanation.
type explainer struct {
	e    *Engine
	last Explanation
}

func (x *explainer) Decide(ctx context.Context, in Input) Decision {
	x.last = x.e.Explain(ctx, in)
	return x.last.Decision
}

func (x *explainer) Digest() string                { return x.e.Digest() }
func (x *explainer) NeedBody(f *URLFacts) BodyNeed { return x.e.NeedBody(f) }

// dnsTestFacts are a DNS question as dnsguard.Facts put it in the input
// (name, host, host_suffixes, qtype); dnsguard builds on this package,
// so its own type cannot be imported here.
type dnsTestFacts struct{ name, qtype string }

func (f *dnsTestFacts) Kind() Kind { return KindDNS }

func (f *dnsTestFacts) AppendKey(dst []byte) []byte {
	return append(appendStr(dst, f.name), f.qtype...)
}

func (f *dnsTestFacts) AddTo(in ast.Object) {
	in.Insert(ast.StringTerm("name"), ast.StringTerm(f.name))
	in.Insert(termHost, ast.StringTerm(f.name))
	var sfx []*ast.Term
	for i := 0; i < len(f.name); i++ {
		if f.name[i] == '.' {
			sfx = append(sfx, ast.StringTerm(f.name[i+1:]))
		}
	}
	in.Insert(ast.StringTerm("host_suffixes"), ast.ArrayTerm(sfx...))
	in.Insert(ast.StringTerm("qtype"), ast.StringTerm(f.qtype))
}

func explainEngine(t *testing.T) *Engine {
	t.Helper()
	dir := modulesWithData(t, explainRules)
	if err := os.WriteFile(filepath.Join(dir, "body.rego"), []byte(explainBody), 0o644); err != nil {
		t.Fatal(err)
	}
	return newTestEngine(t, Config{Dir: dir})
}

// TestExplainAgreesWithDecide is the oracle that keeps Explain's Go
// reading of the rules and the bundle's Rego from drifting: over
// generated requests, the first candidate Explain marks as matching
// decides what the real decision says (rule, reason, allow), for http,
// connect and dns, and Explanation.Decision is Decide's.
func TestExplainAgreesWithDecide(t *testing.T) {
	e := explainEngine(t)
	x := &explainer{e: e}
	pd := PreDial{Engine: x, Floor: openFloor{}}
	ctx := context.Background()
	hosts := []string{"a.test", "b.test", "x.w.test", "w.test", "c.test", "m.test", "10.1.2.3", "10.1.9.9", "z.test", "q.a.test"}
	ports := []string{"80", "443", "8080"}
	methods := []string{"GET", "POST", "DELETE"}
	paths := []string{"/", "/x/1", "/x/secret/k", "/X/SECRET/k", "/x/secret./k", "/y/a", "/y/a/b", "/up", "/api/v1", "/x"}
	ids := []string{"anonymous", "alice", "bob"}
	bodies := []string{"", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ok_1"}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"rm"}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ok_but_not_here"}}`,
		`{"jsonrpc":"2.0","id":4,"method":"resources/read"}`}
	rng := rand.New(rand.NewPCG(24, 3))
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	type request struct{ host, port, method, path, id, body string }
	// Requests the rarer answers need, then generated ones.
	reqs := []request{{"b.test", "80", "POST", "/up", "bob", ""}, {"10.1.2.3", "80", "GET", "/", "bob", ""}}
	for range 400 {
		reqs = append(reqs, request{pick(hosts), pick(ports), pick(methods), pick(paths), pick(ids), pick(bodies)})
	}
	seen := map[string]bool{}
	for _, r := range reqs {
		host, port, id := r.host, r.port, Identity{ID: r.id}
		req := HTTPRequest{Method: r.method, Target: "http://" + host + ":" + port + r.path}
		if r.body != "" {
			req.Body, req.ContentType = strings.NewReader(r.body), "application/json"
		}
		name := fmt.Sprintf("%s %s as %s body=%v", req.Method, req.Target, id.ID, req.Body != nil)
		x.last = Explanation{}
		o := pd.DecideHTTP(ctx, id, KindHTTP, req)
		if o.Err != nil {
			continue
		}
		checkAgreement(t, name, x.last, o.Decision, predictHTTP)
		seen["http "+string(o.Decision.Reason)+" "+o.Decision.Rule] = true

		c := pd.DecideConnect(ctx, id, host+":"+port)
		checkAgreement(t, "CONNECT "+host+":"+port+" as "+id.ID, x.last, c.Decision, predictConnect)
		seen["connect "+string(c.Decision.Reason)+" "+c.Decision.Rule] = true

		if !strings.HasPrefix(host, "10.") {
			f := &dnsTestFacts{name: host, qtype: pick([]string{"A", "TXT"})}
			d := x.Decide(ctx, Input{Identity: id, Facts: f})
			checkAgreement(t, "DNS "+host+" as "+id.ID, x.last, d, predictDNS)
			seen["dns "+string(d.Reason)+" "+d.Rule] = true
		}
	}
	// The generator must reach every kind of answer, or the oracle
	// checks less than it seems to.
	for _, want := range []string{
		"http allowed a", "http rule_deny a-deny", "http no_matching_rule ", "http mcp_tool_denied mcp",
		"http mcp_method_denied mcp", "http tool_not_here mcp", "http allowed mcp", "http allowed net", "http allowed ip",
		"http allowed b", "http allowed b-post", "http rule_deny w-deny",
		"connect allowed insp", "connect allowed c-wide", "connect rule_deny w-deny", "connect tunnel_needs_host_wide_rule ",
		"connect no_matching_rule ", "connect allowed net",
		"dns allowed a", "dns allowed b", "dns no_matching_rule ", "dns qtype_not_allowed ",
	} {
		if !seen[want] {
			t.Errorf("no generated request was decided %q; seen %v", want, seen)
		}
	}
}

// checkAgreement checks x against the decision d the check acted on:
// they are one, and predict's reading of x's candidates gives d.
func checkAgreement(t *testing.T, name string, x Explanation, d Decision, predict func(Explanation) Decision) {
	t.Helper()
	if e := x.Decision; e.Allow != d.Allow || e.Reason != d.Reason || e.Rule != d.Rule || e.Policy != d.Policy || e.Inspect != d.Inspect || e.TLS != d.TLS {
		t.Fatalf("%s: explained %+v; the decision was %+v", name, x.Decision, d)
	}
	p := predict(x)
	if p.Allow != d.Allow || p.Reason != d.Reason || p.Rule != d.Rule || p.Inspect != d.Inspect {
		t.Errorf("%s: the candidates say %+v; Decide said %+v\n%s", name, p, d, explanationText(x))
	}
	for _, c := range x.Candidates {
		if c.Decided != (c.Rule == d.Rule) {
			t.Errorf("%s: candidate %s Decided = %v; the decision names %q", name, c.Rule, c.Decided, d.Rule)
		}
	}
}

// predictHTTP is egress.http read off an explanation: the base refusal,
// the least body refusal of the bundle, the first candidate that matches
// (its verdict), else no_matching_rule.
func predictHTTP(x Explanation) Decision {
	switch {
	case x.Refusal != nil:
		return Decision{Reason: x.Refusal.Reason}
	case len(x.BodyDenials) > 0:
		return x.BodyDenials[0]
	}
	for _, c := range x.Candidates {
		if c.Matches {
			return c.Verdict
		}
	}
	return Decision{Reason: ReasonNoMatchingRule}
}

// bundleTunnelNeedsHostWide is the bundle's own reason
// (rego/connect.rego) for a tunnel only a path rule reaches.
const bundleTunnelNeedsHostWide Reason = "tunnel_needs_host_wide_rule"

// predictConnect is egress.connect read off an explanation: the first
// matching tunnel if it is a deny, else the first inspected one, else the
// first; a view that reaches the port and identity but opens no tunnel
// says the rule is not host-wide.
func predictConnect(x Explanation) Decision {
	if x.Refusal != nil {
		return Decision{Reason: x.Refusal.Reason}
	}
	var first, inspected *Candidate
	reaches := false
	for i := range x.Candidates {
		c := &x.Candidates[i]
		if c.Matches && first == nil {
			first = c
		}
		if c.Matches && inspected == nil && c.Verdict.Inspect {
			inspected = c
		}
		if cond(c, "host") && cond(c, "port") && cond(c, "identity") {
			reaches = true
		}
	}
	switch {
	case first != nil && first.Deny:
		return first.Verdict
	case inspected != nil:
		return inspected.Verdict
	case first != nil:
		return first.Verdict
	case reaches:
		return Decision{Reason: bundleTunnelNeedsHostWide}
	}
	return Decision{Reason: ReasonNoMatchingRule}
}

// predictDNS is egress.dns read off an explanation: the qtype check, the
// matching rule least in data.rules, data.dns.names, else no rule.
func predictDNS(x Explanation) Decision {
	for _, c := range x.Checks {
		if c.Name == "qtype" && !c.OK {
			return Decision{Reason: ReasonQTypeNotAllowed}
		}
	}
	for _, c := range x.Candidates {
		if c.Matches {
			return c.Verdict
		}
	}
	return Decision{Reason: ReasonNoMatchingRule}
}

func cond(c *Candidate, name string) bool {
	for _, k := range c.Conditions {
		if k.Name == name {
			return k.OK
		}
	}
	return false
}

func explanationText(x Explanation) string {
	var b strings.Builder
	if err := x.WriteText(&b); err != nil {
		return err.Error()
	}
	return b.String()
}

// TestExplainHostColumn: the host a candidate shows as matching is the
// index lookup's answer, and the display matcher (which of a rule's
// hosts matched) agrees with it both ways.
func TestExplainHostColumn(t *testing.T) {
	e := explainEngine(t)
	vx := e.cur.views
	for _, host := range []string{"a.test", "x.w.test", "w.test", "y.x.w.test", "10.1.2.3", "10.1.200.1", "10.2.0.1", "b.test", "q.a.test"} {
		ip, _ := netip.ParseAddr(host)
		var stack [16]int
		found := vx.lookup(stack[:0], host, ip.IsValid())
		for v := range vx.views {
			shown := false
			for _, h := range vx.ruleHosts[v] {
				shown = shown || hostPatternMatches(h, host, ip)
			}
			in := false
			for _, f := range found {
				in = in || f == v
			}
			if shown != in {
				t.Errorf("host %s, view %d (%v): display matcher says %v, the index %v", host, v, vx.ruleHosts[v], shown, in)
			}
		}
	}
}

// TestExplainNearMiss: a "*.x" rule asked for x itself is listed as
// missing on host alone; a rule that misses on more is not.
func TestExplainNearMiss(t *testing.T) {
	e := explainEngine(t)
	x := e.Explain(context.Background(), Input{Identity: Identity{ID: "anonymous"}, Facts: mustParse(t, "GET", "http://w.test/x/1")})
	var got []string
	for _, c := range x.Candidates {
		got = append(got, c.Rule)
		if c.Conditions[0].Name != "host" || c.Conditions[0].OK || c.Matches {
			t.Errorf("candidate %+v: want a host miss", c)
		}
	}
	// w-deny is for port 443 only: it misses on port too.
	if strings.Join(got, " ") != "a" {
		t.Errorf("candidates of http://w.test/x/1 = %v; want [a]\n%s", got, explanationText(x))
	}
}

// TestExplainBounded: past MaxCandidates, candidates are counted, not
// listed, and the one the decision names is always kept.
func TestExplainBounded(t *testing.T) {
	var rules []string
	for i := range MaxCandidates + 5 {
		rules = append(rules, fmt.Sprintf(`{"id": "r%d", "hosts": ["many.test"], "ports": [80], "paths": ["/p%d"]}`, i, i))
	}
	e := newTestEngine(t, Config{Dir: modulesWithData(t, `{"rules": [`+strings.Join(rules, ",")+`]}`)})
	last := fmt.Sprintf("/p%d", MaxCandidates+4)
	x := e.Explain(context.Background(), Input{Facts: mustParse(t, "GET", "http://many.test"+last)})
	if !x.Decision.Allow || len(x.Candidates) != MaxCandidates+1 || x.Omitted != 4 {
		t.Fatalf("Explain = %d candidates, %d omitted, decision %+v; want %d, 4, allowed", len(x.Candidates), x.Omitted, x.Decision, MaxCandidates+1)
	}
	if c := x.Candidates[len(x.Candidates)-1]; !c.Decided || c.Rule != x.Decision.Rule {
		t.Errorf("last candidate = %+v; want the decided rule %s kept", c, x.Decision.Rule)
	}
}

// TestExplainRefusal: a refusal before the policy says so, keeps the
// facts known and the refusal's detail, and names no rule.
func TestExplainRefusal(t *testing.T) {
	e := explainEngine(t)
	f := mustParse(t, "GET", "http://10.1.2.3/")
	x := e.ExplainRefusal(KindHTTP, Identity{ID: "anonymous"}, f, &DenyError{Reason: ReasonPrivateAddress, Detail: "10.1.2.3 is private"})
	if x.Refusal == nil || !x.Refusal.BeforePolicy || x.Refusal.Reason != ReasonPrivateAddress || x.Decision.Allow || x.Decision.Reason != ReasonPrivateAddress || x.Decision.Policy != e.Digest() {
		t.Fatalf("ExplainRefusal = %+v", x)
	}
	for _, c := range x.Candidates {
		if c.Decided {
			t.Errorf("candidate %s decided a request no rule was asked about", c.Rule)
		}
	}
	if text := explanationText(x); !strings.Contains(text, "refused before the policy: private_address (10.1.2.3 is private)") {
		t.Errorf("text does not say the refusal came first:\n%s", text)
	}
	if x := e.ExplainRefusal(KindHTTP, Identity{}, nil, &DenyError{Reason: ReasonMalformedURL}); x.Facts != nil || len(x.Candidates) != 0 {
		t.Errorf("ExplainRefusal without facts = %+v; want no facts, no candidates", x)
	}
}
