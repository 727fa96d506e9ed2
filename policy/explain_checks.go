package policy

import (
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// The checks of the dns and sql entry points are read from the bundle by
// name (data.egress.dns.qtypes, data.egress.sql.profile_name, …), the
// rules the embedded bundle decides with: a bundle that renames them
// shows fewer checks, and the decision is Decide's either way.

// dnsChecks are the qtype the name is asked with against the answered
// types, and whether data.dns.names lists the name.
func dnsChecks(q queryFunc, input ast.Object) []Condition {
	var out []Condition
	qtype, _ := termString(input.Get(ast.StringTerm("qtype")))
	if qtypes := stringsOfAny(q("data.egress.dns.qtypes", input)); qtypes != nil {
		out = append(out, Condition{Name: "qtype", OK: slices.Contains(qtypes, qtype), Got: qtype, Want: strings.Join(qtypes, " ")})
	}
	if names, ok := q("data.egress.dns.extra_names", input).([]any); ok {
		name, _ := termString(input.Get(ast.StringTerm("name")))
		listed, _ := q("data.egress.dns.listed", input).(bool)
		want := strings.Join(stringsOfAny(names), " ")
		if want == "" {
			want = "none listed"
		}
		out = append(out, Condition{Name: "dns.names", OK: listed, Got: name, Want: want})
	}
	return out
}

// sqlChecks are the identity's profile, the database against the
// profile's, the refusals every profile makes, and the profile's own.
func sqlChecks(q queryFunc, input ast.Object) []Condition {
	var out []Condition
	profile, ok := q("data.egress.sql.profile_name", input).(string)
	if !ok {
		return append(out, Condition{Name: "profile", Got: "none", Want: "the identity's attribute sql_profile, or its entry in data.sql.identities"})
	}
	_, exists := q("data.egress.sql.profile", input).(map[string]any)
	out = append(out, Condition{Name: "profile", OK: exists, Got: profile, Want: "a profile in data.sql.profiles"})
	if !exists {
		return out
	}
	db, _ := termString(input.Get(ast.StringTerm("database")))
	dbOK, _ := q("data.egress.sql.database_ok", input).(bool)
	dbs := stringsOfAny(q("data.egress.sql.profile.databases", input))
	out = append(out, Condition{Name: "database", OK: dbOK, Got: db, Want: strings.Join(dbs, " ")})
	if cmd, _ := q("input.statement.command", input).(string); cmd == "connect" {
		// A login is decided on the database alone.
		return out
	}
	for _, check := range []struct{ name, want, ref string }{
		{"always", "refused in every profile", "data.egress.sql.forbidden"},
		{"allowed", "what profile " + profile + " allows", "data.egress.sql.refusal"},
	} {
		cond := Condition{Name: check.name, OK: true, Got: "nothing refused", Want: check.want}
		if r, ok := q(check.ref, input).(string); ok {
			cond.OK, cond.Got, cond.Reason = false, r, Reason(r)
		}
		out = append(out, cond)
	}
	return out
}
