package policy

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestResolveExtends: lists add, objects merge key by key, scalars are
// overridden, chains resolve base first, and a missing base or a cycle is
// refused.
func TestResolveExtends(t *testing.T) {
	tests := []struct {
		name, profiles, want, err string
	}{
		{"lists add, objects merge, scalars override",
			`{"ro": {"read": ["public.*"], "functions": ["common"], "require_where": true, "setting_bounds": {"a": 1, "b": 2}},
			  "billing": {"extends": "ro", "read": ["billing.*", "public.*"], "require_where": false, "setting_bounds": {"b": 3}}}`,
			`{"billing":{"functions":["common"],"read":["public.*","billing.*"],"require_where":false,"setting_bounds":{"a":1,"b":3}},` +
				`"ro":{"functions":["common"],"read":["public.*"],"require_where":true,"setting_bounds":{"a":1,"b":2}}}`, ""},
		{"chain", `{"c": {"extends": "b", "read": ["c"]}, "b": {"extends": "a", "read": ["b"]}, "a": {"read": ["a"]}}`,
			`{"a":{"read":["a"]},"b":{"read":["a","b"]},"c":{"read":["a","b","c"]}}`, ""},
		{"missing base", `{"b": {"extends": "nope"}}`, "", `sql.profiles["b"].extends "nope", which sql.profiles lacks (have [b])`},
		{"cycle", `{"a": {"extends": "b"}, "b": {"extends": "a"}}`, "", "makes a cycle"},
		{"self", `{"a": {"extends": "a"}}`, "", "makes a cycle"},
		{"not a name", `{"a": {"extends": ["b"]}, "b": {}}`, "", `sql.profiles["a"].extends must be a profile name, got ["b"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p map[string]any
			if err := json.Unmarshal([]byte(tt.profiles), &p); err != nil {
				t.Fatal(err)
			}
			err := resolveExtends(p)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("resolveExtends = %v; want an error containing %q", err, tt.err)
				}
				return
			}
			got, _ := json.Marshal(p)
			if err != nil || string(got) != tt.want {
				t.Errorf("resolveExtends = %v, %s; want %s", err, got, tt.want)
			}
		})
	}
}
