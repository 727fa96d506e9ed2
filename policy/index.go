package policy

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
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
	Action     string   `json:"action,omitempty"`
	// Comment is free text for the operator.
	Comment string `json:"comment,omitempty"`
}

// buildIndex validates data.rules and returns the host index Rego looks
// candidates up in, so an evaluation touches only the rules for its host.
func buildIndex(raw any) (map[string]any, error) {
	exact := map[string]any{}
	wildcard := map[string]any{}
	var cidrs []any
	cidrAt := map[string]int{}
	idx := map[string]any{"exact": exact, "wildcard": wildcard, "cidr": []any{}}
	if raw == nil {
		return idx, nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	var rules []ruleSpec
	if err := dec.Decode(&rules); err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	add := func(m map[string]any, k string, i int) {
		l, _ := m[k].([]any)
		m[k] = append(l, i)
	}
	ids := make(map[string]int, len(rules))
	for i, r := range rules {
		if err := r.validate(); err != nil {
			return nil, fmt.Errorf("rules[%d].%w", i, err)
		}
		if j, dup := ids[r.ID]; dup {
			return nil, fmt.Errorf("rules[%d].id %q is also rules[%d].id", i, r.ID, j)
		}
		ids[r.ID] = i
		for _, h := range r.Hosts {
			switch {
			case strings.HasPrefix(h, "*."):
				add(wildcard, h[2:], i)
			case strings.Contains(h, "/"):
				at, ok := cidrAt[h]
				if !ok {
					at = len(cidrs)
					cidrAt[h] = at
					cidrs = append(cidrs, map[string]any{"cidr": h, "rules": []any{}})
				}
				c := cidrs[at].(map[string]any)
				c["rules"] = append(c["rules"].([]any), i)
			default:
				add(exact, h, i)
			}
		}
	}
	if cidrs != nil {
		idx["cidr"] = cidrs
	}
	return idx, nil
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
	}
	for j, p := range r.Paths {
		if !strings.HasPrefix(p, "/") {
			return fmt.Errorf("paths[%d] must start with \"/\", got %q (rule %q)", j, p, r.ID)
		}
	}
	if r.Action != "" && r.Action != "allow" && r.Action != "deny" {
		return fmt.Errorf("action must be \"allow\" or \"deny\", got %q (rule %q)", r.Action, r.ID)
	}
	return nil
}

func validateRuleHost(h string) error {
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
		if a.String() != h {
			return fmt.Errorf("must be a canonical IP, got %q (want %q)", h, a.String())
		}
		return nil
	}
	n, err := normalizeName(h)
	if err != nil || n != h {
		return fmt.Errorf("must be a lower-case ASCII name (IDNs as xn--…), got %q", h)
	}
	return nil
}
