package policy

import (
	"fmt"
	"slices"
	"sort"
)

// extendsKey is the data.sql.profiles key by which a profile starts from
// another: {"extends": "read_only", "read": ["billing.invoices"]}.
const extendsKey = "extends"

// resolveExtends replaces, in place, every profile of profiles that
// extends another with the merge of the two (mergeProfile), the base
// resolved first, and removes the key: Rego sees whole profiles. A
// missing base, a base that is not a profile and a cycle are errors.
// Resolution is bounded: a chain longer than the number of profiles is a
// cycle.
func resolveExtends(profiles map[string]any) error {
	names := make([]string, 0, len(profiles))
	for n := range profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	done := map[string]bool{}
	var resolve func(name string, chain []string) error
	resolve = func(name string, chain []string) error {
		if done[name] {
			return nil
		}
		p, ok := profiles[name].(map[string]any)
		if !ok {
			return fmt.Errorf("sql.profiles[%q] must be an object", name)
		}
		raw, has := p[extendsKey]
		if !has {
			done[name] = true
			return nil
		}
		base, ok := raw.(string)
		if !ok {
			return fmt.Errorf("sql.profiles[%q].extends must be a profile name, got %s", name, jsonString(raw))
		}
		if slices.Contains(chain, base) || base == name || len(chain) > len(profiles) {
			return fmt.Errorf("sql.profiles[%q].extends %q makes a cycle (%v)", name, base, append(chain, name, base))
		}
		if _, ok := profiles[base]; !ok {
			return fmt.Errorf("sql.profiles[%q].extends %q, which sql.profiles lacks (have %v)", name, base, names)
		}
		if err := resolve(base, append(chain, name)); err != nil {
			return err
		}
		profiles[name] = mergeProfile(profiles[base].(map[string]any), p)
		done[name] = true
		return nil
	}
	for _, n := range names {
		if err := resolve(n, nil); err != nil {
			return err
		}
	}
	return nil
}

// mergeProfile is profile p on top of base: a key p lacks is base's; two
// lists are base's items then p's new ones (so "read" adds tables and
// "functions" function sets); two objects merge key by key, p's value
// winning ("setting_bounds"); otherwise p's value wins. extends is
// dropped.
func mergeProfile(base, p map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(p))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range p {
		if k == extendsKey {
			continue
		}
		switch pv := v.(type) {
		case []any:
			if bv, ok := out[k].([]any); ok {
				merged := slices.Clone(bv)
				for _, x := range pv {
					if !slices.ContainsFunc(merged, func(y any) bool { return jsonString(x) == jsonString(y) }) {
						merged = append(merged, x)
					}
				}
				out[k] = merged
				continue
			}
		case map[string]any:
			if bv, ok := out[k].(map[string]any); ok {
				merged := make(map[string]any, len(bv)+len(pv))
				for bk, bx := range bv {
					merged[bk] = bx
				}
				for pk, px := range pv {
					merged[pk] = px
				}
				out[k] = merged
				continue
			}
		}
		out[k] = v
	}
	return out
}
