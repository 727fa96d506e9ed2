package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"

	"github.com/gobwas/glob"
	"github.com/open-policy-agent/opa/v1/ast"
)

// indexKey is where the rule index is mounted: data.rule_index.
const indexKey = "rule_index"

// ruleSpec is one data.rules entry as egressd validates it. Rego reads the
// rule itself; Go only checks its shape and indexes its hosts.
type ruleSpec struct {
	ID         string   `json:"id"`
	Hosts      []string `json:"hosts"`
	Ports      []int    `json:"ports"`
	Methods    []string `json:"methods,omitempty"`
	Paths      []string `json:"paths,omitempty"`
	Identities []string `json:"identities,omitempty"`
	TLS        *bool    `json:"tls,omitempty"`
	// Inspect asks for the CONNECT to be terminated so that methods and
	// paths apply to the requests inside (see rego/README.md).
	Inspect bool   `json:"inspect,omitempty"`
	Action  string `json:"action,omitempty"`
	// Credentials are checked by parseCredentials.
	Credentials []json.RawMessage `json:"credentials,omitempty"`
	// The request keys (see RuleOptions): bounds on what the rule's
	// requests carry and the body conditions decided on.
	MaxBodyBytes    *int64 `json:"max_body_bytes,omitempty"`
	MaxRequestBytes int64  `json:"max_request_bytes,omitempty"`
	// MCPKey and LLMKey are decoded by validateRequestKeys into mcp and
	// llm, so that an unknown key names its object.
	MCPKey         json.RawMessage `json:"mcp,omitempty"`
	LLMKey         json.RawMessage `json:"llm,omitempty"`
	mcp            *MCPRule
	llm            *llmRuleSpec
	SecretPatterns string `json:"secret_patterns,omitempty"`
	// Mode is "enforce" (or absent) or "observe": the rule's liftable
	// denies are let through and recorded as would_deny.
	Mode string `json:"mode,omitempty"`
	// Comment is free text for the operator.
	Comment string `json:"comment,omitempty"`
}

// buildIndex validates data.rules and returns the index Rego decides
// with, so that an evaluation touches only the rules for its host and does
// no string work:
//
//	hosts: {"<name or canonical IP>" or "*.<suffix>": [view index, …]}
//	cidr:  [{"cidr": "<prefix>", "rules": [view index, …]}]
//	rules: [view, …]  deny rules first, then allow rules, each in data order
//
// Ordering deny views first lets Rego pick the lowest matching index and
// have an explicit deny beat every allow, whatever the rules' order. A view
// is the rule with its defaults filled in (see ruleSpec.view).
func buildIndex(raw any) (*ast.Term, *viewIndex, error) {
	rules, err := decodeRules(raw)
	if err != nil {
		return nil, nil, err
	}
	ids := make(map[string]int, len(rules))
	order := make([]int, 0, len(rules))
	for i := range rules {
		r := &rules[i]
		if err := r.validate(); err != nil {
			return nil, nil, fmt.Errorf("rules[%d].%w", i, err)
		}
		if j, dup := ids[r.ID]; dup {
			return nil, nil, fmt.Errorf("rules[%d].id %q is also rules[%d].id", i, r.ID, j)
		}
		ids[r.ID] = i
		if r.Action == "deny" {
			order = append(order, i)
		}
	}
	for i := range rules {
		if rules[i].Action != "deny" {
			order = append(order, i)
		}
	}
	views := make([]*ast.Term, 0, len(rules))
	paths := make([][]string, 0, len(rules))
	fold := make([]bool, 0, len(rules))
	byView, byRule := newHostIndex(), newHostIndex()
	for _, i := range order {
		r := &rules[i]
		views = append(views, r.view(i))
		paths = append(paths, r.Paths)
		fold = append(fold, r.Action == "deny")
		if len(r.Paths) == 0 {
			paths[len(paths)-1] = []string{"**"}
		}
	}
	vx := newViewIndex(views, paths, fold)
	vx.setOptions(rules, order)
	vx.identities = map[string][]string{}
	for i := range rules {
		if m, _ := ParseMode(rules[i].Mode); m == ModeObserve {
			vx.observe[rules[i].ID] = true
		}
		if len(rules[i].Identities) > 0 {
			vx.identities[rules[i].ID] = rules[i].Identities
		}
	}
	for v, i := range order {
		for _, h := range rules[i].Hosts {
			byView.add(h, v)
			vx.addHost(h, v)
		}
	}
	for i := range rules {
		for _, h := range rules[i].Hosts {
			byRule.add(h, i)
		}
	}
	return ast.ObjectTerm(
		ast.Item(ast.StringTerm("views"), ast.ArrayTerm(views...)),
		ast.Item(ast.StringTerm("hosts"), byView.hostsTerm(allHosts)),
		ast.Item(ast.StringTerm("cidr_views"), byView.cidrTerm()),
		ast.Item(ast.StringTerm("exact"), byRule.hostsTerm(exactHosts)),
		ast.Item(ast.StringTerm("wildcard"), byRule.hostsTerm(wildcardHosts)),
		ast.Item(ast.StringTerm("cidr"), byRule.cidrTerm()),
	), vx, nil
}

// decodeRules decodes data.rules one rule at a time, so that an error
// names the rule's index and id: `rules[5].ports: want a number, got a
// string (rule "docs")`, not a Go type the operator never wrote.
func decodeRules(raw any) ([]ruleSpec, error) {
	if raw == nil {
		return nil, nil
	}
	list, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("rules must be a list of rule objects, got %s", jsonKind(raw))
	}
	rules := make([]ruleSpec, len(list))
	for i, r := range list {
		obj, ok := r.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("rules[%d] must be a rule object, got %s", i, jsonKind(r))
		}
		named := ""
		if id, ok := obj["id"].(string); ok {
			named = fmt.Sprintf(" (rule %q)", id)
		}
		b, err := json.Marshal(obj)
		if err != nil {
			return nil, fmt.Errorf("rules[%d]: %w%s", i, err, named)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rules[i]); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				return nil, fmt.Errorf("rules[%d].%s: want %s, got a %s%s", i, te.Field, goKind(te.Type), te.Value, named)
			}
			if key, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
				return nil, fmt.Errorf("rules[%d] has unknown key %s%s: %s", i, key, named, unknownRuleKey(key))
			}
			return nil, fmt.Errorf("rules[%d]: %w%s", i, err, named)
		}
	}
	return rules, nil
}

// jsonKind names the JSON type of a decoded value.
func jsonKind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return "a number"
}

// goKind names the JSON a field of Go type t takes.
func goKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "a list of " + strings.TrimPrefix(goKind(t.Elem()), "a ") + "s"
	case reflect.Pointer:
		return goKind(t.Elem())
	}
	return t.String()
}

// hostIndex maps rule hosts to lists of indexes, keeping first-seen order.
type hostIndex struct {
	keys, cidrKeys []string
	hosts, cidrs   map[string][]*ast.Term
}

func newHostIndex() *hostIndex {
	return &hostIndex{hosts: map[string][]*ast.Term{}, cidrs: map[string][]*ast.Term{}}
}

func (x *hostIndex) add(h string, i int) {
	m, keys := x.hosts, &x.keys
	if strings.Contains(h, "/") {
		m, keys = x.cidrs, &x.cidrKeys
	}
	if _, ok := m[h]; !ok {
		*keys = append(*keys, h)
	}
	m[h] = append(m[h], ast.IntNumberTerm(i))
}

// Which hosts a hostsTerm holds.
const (
	allHosts      = iota // every name and IP, "*.x" keyed as written
	exactHosts           // names and IPs without "*."
	wildcardHosts        // only "*.x", keyed by "x"
)

// hostsTerm is {host: [i, …]} for the hosts mode selects.
func (x *hostIndex) hostsTerm(mode int) *ast.Term {
	obj := ast.NewObject()
	for _, h := range x.keys {
		key, wild := h, strings.HasPrefix(h, "*.")
		switch {
		case mode == exactHosts && wild, mode == wildcardHosts && !wild:
			continue
		case mode == wildcardHosts:
			key = h[2:]
		}
		obj.Insert(ast.StringTerm(key), ast.ArrayTerm(x.hosts[h]...))
	}
	return ast.NewTerm(obj)
}

// cidrTerm lists the CIDR hosts in sorted order.
func (x *hostIndex) cidrTerm() *ast.Term {
	slices.Sort(x.cidrKeys)
	ts := make([]*ast.Term, 0, len(x.cidrKeys))
	for _, c := range x.cidrKeys {
		ts = append(ts, ast.ObjectTerm(
			ast.Item(ast.StringTerm("cidr"), ast.StringTerm(c)),
			ast.Item(ast.StringTerm("rules"), ast.ArrayTerm(x.cidrs[c]...)),
		))
	}
	return ast.ArrayTerm(ts...)
}

// view is the rule as Rego matches it, with every choice made total so
// the match is a chain of lookups with no alternatives:
//
//	id, deny, host_wide        as written / derived
//	index                      the rule's position in data.rules
//	tunnel                     deny, host_wide or inspect: the view decides
//	                           a CONNECT
//	inspect                    the rule asks for the CONNECT to be terminated
//	ports                      a set
//	methods, identities        {name: true}; empty with any_method /
//	                           any_identity true when absent
//	paths                      globs; ["**"] when absent (matches any path)
//	tls                        present only when the rule sets it
//	decision                   the http decision this rule yields
func (r *ruleSpec) view(index int) *ast.Term {
	// Methods and identities are {name: true} objects so that Rego can
	// default a miss with object.get in one call.
	set := func(ss []string) *ast.Term {
		obj := ast.NewObject()
		for _, s := range ss {
			obj.Insert(ast.StringTerm(s), ast.BooleanTerm(true))
		}
		return ast.NewTerm(obj)
	}
	ports := make([]*ast.Term, len(r.Ports))
	for i, p := range r.Ports {
		ports[i] = ast.IntNumberTerm(p)
	}
	paths := []*ast.Term{ast.StringTerm("**")}
	if len(r.Paths) > 0 {
		paths = paths[:0]
		for _, p := range r.Paths {
			paths = append(paths, ast.StringTerm(p))
		}
	}
	deny := r.Action == "deny"
	// A rule deciding on bodies never opens an opaque tunnel, in which
	// no body is seen.
	hostWide := len(r.Methods) == 0 && len(r.Paths) == 0 && !r.decidesBody()
	reason := ReasonAllowed
	if deny {
		reason = ReasonRuleDeny
	}
	items := [][2]*ast.Term{
		ast.Item(ast.StringTerm("id"), ast.StringTerm(r.ID)),
		ast.Item(ast.StringTerm("index"), ast.IntNumberTerm(index)),
		ast.Item(ast.StringTerm("deny"), ast.BooleanTerm(deny)),
		ast.Item(ast.StringTerm("host_wide"), ast.BooleanTerm(hostWide)),
		ast.Item(ast.StringTerm("tunnel"), ast.BooleanTerm(deny || hostWide || r.Inspect)),
		ast.Item(ast.StringTerm("inspect"), ast.BooleanTerm(r.Inspect)),
		ast.Item(ast.StringTerm("ports"), ast.SetTerm(ports...)),
		ast.Item(ast.StringTerm("methods"), set(r.Methods)),
		ast.Item(ast.StringTerm("any_method"), ast.BooleanTerm(len(r.Methods) == 0)),
		ast.Item(ast.StringTerm("identities"), set(r.Identities)),
		ast.Item(ast.StringTerm("any_identity"), ast.BooleanTerm(len(r.Identities) == 0)),
		ast.Item(ast.StringTerm("paths"), ast.ArrayTerm(paths...)),
		ast.Item(ast.StringTerm("decision"), ast.ObjectTerm(
			ast.Item(ast.StringTerm("allow"), ast.BooleanTerm(!deny)),
			ast.Item(ast.StringTerm("reason"), ast.StringTerm(reason.String())),
			ast.Item(ast.StringTerm("rule"), ast.StringTerm(r.ID)),
		)),
	}
	if r.TLS != nil {
		items = append(items, ast.Item(ast.StringTerm("tls"), ast.BooleanTerm(*r.TLS)))
	}
	return ast.ObjectTerm(items...)
}

// validate checks one rule. Hosts must already be in the canonical form
// requests are normalized to, so that what the operator wrote is exactly
// what is matched.
func (r *ruleSpec) validate() error {
	if r.ID == "" {
		return fmt.Errorf("id must be non-empty")
	}
	if len(r.Hosts) == 0 {
		return fmt.Errorf("hosts must be non-empty (rule %q)", r.ID)
	}
	for j, h := range r.Hosts {
		if err := validateRuleHost(h); err != nil {
			return fmt.Errorf("hosts[%d] %w (rule %q)", j, err, r.ID)
		}
		if slices.Contains(r.Hosts[:j], h) {
			return fmt.Errorf("hosts[%d] %q is listed twice (rule %q)", j, h, r.ID)
		}
	}
	if len(r.Ports) == 0 {
		return fmt.Errorf("ports must be non-empty (rule %q)", r.ID)
	}
	for j, p := range r.Ports {
		if p < 1 || p > 65535 {
			return fmt.Errorf("ports[%d] must be 1-65535, got %d (rule %q)", j, p, r.ID)
		}
	}
	for j, m := range r.Methods {
		if m == "" || !isToken(m) {
			return fmt.Errorf("methods[%d] must be an HTTP method, got %q (rule %q)", j, m, r.ID)
		}
		// Methods are case-sensitive and clients send them upper-case:
		// "get" would never match a request.
		if up := strings.ToUpper(m); up != m {
			return fmt.Errorf("methods[%d] must be upper-case, got %q, which no request matches: write %q (rule %q)", j, m, up, r.ID)
		}
	}
	for j, p := range r.Paths {
		if !strings.HasPrefix(p, "/") {
			return fmt.Errorf("paths[%d] must start with \"/\", got %q (rule %q)", j, p, r.ID)
		}
		if _, err := glob.Compile(p, '/'); err != nil {
			return fmt.Errorf("paths[%d] must be a glob (\"*\" one segment, \"**\" any depth), got %q, which never matches: %v (rule %q)", j, p, err, r.ID)
		}
	}
	if r.Action != "" && r.Action != "allow" && r.Action != "deny" {
		return fmt.Errorf("action must be \"allow\" or \"deny\", got %q (rule %q)", r.Action, r.ID)
	}
	if _, err := ParseMode(r.Mode); err != nil {
		return fmt.Errorf("mode %w (rule %q)", err, r.ID)
	}
	if r.Inspect && r.Action == "deny" {
		return fmt.Errorf("inspect must not be set on a deny rule, which closes the tunnel anyway: remove it (rule %q)", r.ID)
	}
	if r.Inspect && r.TLS != nil && !*r.TLS {
		return fmt.Errorf("inspect needs TLS in the tunnel, but tls is false: remove one of them (rule %q)", r.ID)
	}
	for j, h := range r.Hosts {
		if r.Inspect && strings.Contains(h, "/") {
			// A leaf is minted for the CONNECT host; a CIDR would let a
			// client have one minted for any address in it.
			return fmt.Errorf("hosts[%d] %q: inspect needs names or IPs, not a CIDR: list the addresses (rule %q)", j, h, r.ID)
		}
	}
	return r.validateRequestKeys()
}

func validateRuleHost(h string) error {
	if instead := hostWrittenAsTarget(h); instead != "" {
		return fmt.Errorf("%q %s", h, instead)
	}
	if strings.HasPrefix(h, "*.") {
		if n, err := normalizeName(h[2:]); err != nil || n != h[2:] {
			return fmt.Errorf("must be a lower-case ASCII name after \"*.\", got %q", h)
		}
		return nil
	}
	if strings.Contains(h, "/") {
		p, err := netip.ParsePrefix(h)
		if err != nil || p.Masked().String() != h {
			return fmt.Errorf("must be a canonical CIDR, got %q", h)
		}
		return nil
	}
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" || a.String() != h {
			return fmt.Errorf("must be a canonical IP, got %q (want %q)", h, a.String())
		}
		return nil
	}
	if endsInNumber(h) {
		return fmt.Errorf("must be a canonical IP, got %q", h)
	}
	n, err := normalizeName(h)
	if err != nil || n != h {
		return fmt.Errorf("must be a lower-case ASCII name (IDNs as xn--…), got %q", h)
	}
	return nil
}
