# The HTTP entry point: plain proxied requests (input.kind "http") and the
# redirects a client is sent (input.kind "redirect") are judged by the same
# rules. Refusals come first, then the bundle's own refusals of what a
# request carries (package egress.body: deny contains {"reason", "rule"},
# deciding on input.body, input.mcp and input.llm; see README.md), then
# the first matching rule view (deny views sort before allows), and
# anything unmatched is denied.
package egress.http

# The refusal is input.flags[0] (base.refusal), read here directly: a
# rule reference costs an evaluation of its own.
decision := {"allow": false, "reason": reason, "rule": ""} if {
	reason := input.flags[0]
} else := {"allow": false, "reason": d.reason, "rule": d.rule} if {
	d := min(data.egress.body.deny)
} else := input.views[i].decision if {
	i := min(matches)
} else := {"allow": false, "reason": "no_matching_rule", "rule": ""}

# matches are the views that match port, identity and method. input.views
# are the views whose hosts match the request's host and whose path globs
# match its decoded path, in view order (egressd looks them up in the rule
# index and matches the globs, "*" within one segment, "**" across any
# number, "/p/**" covering "/p" too, case-sensitively for allow rules and
# in any ASCII case for deny rules, before evaluating). Requests whose decoding could change the
# segments (encoded separators, dot segments, …) carry a flag and were
# refused above.
#
# object.get(set, key, any_x) is true when the key is listed, else any_x:
# false fails the body.
matches contains i if {
	some i, r in input.views
	r.ports[input.port]
	object.get(r.identities, input.identity.id, r.any_identity)
	object.get(r.methods, input.method, r.any_method)
}
