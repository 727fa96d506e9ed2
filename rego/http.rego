# The HTTP entry point: plain proxied requests (input.kind "http") and the
# redirects a client is sent (input.kind "redirect") are judged by the same
# rules. Refusals beat explicit denies, explicit denies beat allows, and
# anything unmatched is denied.
package egress.http

import data.egress.base

decision := base.deny(reason, "") if {
	reason := base.refusal
} else := base.deny("rule_deny", data.rules[i].id) if {
	count(denied) > 0
	i := min(denied)
} else := base.allow(data.rules[i].id) if {
	count(allowed) > 0
	i := min(allowed)
} else := base.deny("no_matching_rule", "")

denied contains i if {
	some i in base.candidates
	r := data.rules[i]
	base.is_deny(r)
	request_matches(r)
}

allowed contains i if {
	some i in base.candidates
	r := data.rules[i]
	not base.is_deny(r)
	request_matches(r)
}

request_matches(r) if {
	input.port in r.ports
	method_ok(r)
	path_ok(r)
	base.identity_ok(r)
}

method_ok(r) if not r.methods

method_ok(r) if input.method in r.methods

path_ok(r) if not r.paths

# Paths are globs over the decoded path, segment-wise: "*" stays within one
# segment, "**" spans any number. Requests whose decoding could change the
# segments (encoded separators, dot segments, …) never get here: they carry
# a path flag and are refused above.
path_ok(r) if {
	some p in r.paths
	glob.match(p, ["/"], input.path_decoded)
}
