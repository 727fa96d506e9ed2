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
# The name and the CIDR bodies differ only in how the host is looked up;
# they are spelled out rather than sharing a function because this is the
# hottest rule of the bundle.
matches contains i if {
	some key in input.host_keys
	some i in data.rule_index.hosts[key]
	request_matches(data.rule_index.views[i])
}

matches contains i if {
	ip := input.ip
	some c in data.rule_index.cidr_views
	net.cidr_contains(c.cidr, ip)
	some i in c.rules
	request_matches(data.rule_index.views[i])
}

# Paths are globs over the decoded path, segment-wise: "*" stays within one
# segment, "**" spans any number. Requests whose decoding could change the
# segments (encoded separators, dot segments, …) carry a flag and were
# refused above.
request_matches(r) if {
	r.ports[input.port]
	object.get(r.identities, input.identity.id, r.any_identity) == true
	object.get(r.methods, input.method, r.any_method) == true
	some p in r.paths
	glob.match(p, ["/"], input.path_decoded)
}
