# The HTTP entry point: plain proxied requests (input.kind "http") and the
# redirects a client is sent (input.kind "redirect") are judged by the same
# rules. Refusals come first, then the lowest matching rule view (deny
# views sort before allows), and anything unmatched is denied.
package egress.http

import data.egress.base

decision := {"allow": false, "reason": reason, "rule": ""} if {
	reason := base.refusal
} else := data.rule_index.views[i].decision if {
	i := min(matches)
} else := {"allow": false, "reason": "no_matching_rule", "rule": ""}

# matches are the views that match host, port, identity, method and path.
# Paths are globs over the decoded path, segment-wise: "*" stays within one
# segment, "**" spans any number. Requests whose decoding could change the
# segments (encoded separators, dot segments, …) carry a flag and were
# refused above.
#
# The name and the CIDR bodies differ only in how the host is looked up.
# The match is spelled out in both rather than shared through a function:
# this is the hottest rule of the bundle and a call costs a tenth of it.
# object.get(set, key, any_x) is true when the key is listed, else any_x:
# false fails the body.
matches contains i if {
	some key in input.host_keys
	some i in data.rule_index.hosts[key]
	r := data.rule_index.views[i]
	r.ports[input.port]
	object.get(r.identities, input.identity.id, r.any_identity)
	object.get(r.methods, input.method, r.any_method)
	some p in r.paths
	glob.match(p, ["/"], input.path_decoded)
}

matches contains i if {
	ip := input.ip
	some c in data.rule_index.cidr_views
	net.cidr_contains(c.cidr, ip)
	some i in c.rules
	r := data.rule_index.views[i]
	r.ports[input.port]
	object.get(r.identities, input.identity.id, r.any_identity)
	object.get(r.methods, input.method, r.any_method)
	some p in r.paths
	glob.match(p, ["/"], input.path_decoded)
}
