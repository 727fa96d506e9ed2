# Shared rule matching for the http and connect entry points.
#
# Rules are data (data.rules, see data.json). When egressd loads a bundle it
# validates them and mounts an index at data.rule_index:
#   views:      [view, …], deny rules first, then allow rules, in data order
#   hosts:      {"<name or IP>" or "*.<suffix>": [view index, …]}
#   cidr_views: [{"cidr": "<prefix>", "rules": [view index, …]}]
# and, by index into data.rules (for entry points that read rules as
# written): exact {"<name or IP>": [i, …]}, wildcard {"<suffix>": [i, …]},
# cidr [{"cidr", "rules": [i, …]}].
# A view is a rule with its defaults filled in: sets ports, methods and
# identities (any_method / any_identity when absent), paths (["**"] when
# absent), host_wide, inspect, tunnel (deny, host_wide or inspect), tls
# when set, and the http decision it yields.
# Go also computes the request facts (input.path_decoded, input.flags, …)
# and, for http and connect, input.views: the views whose hosts match the
# request's host (and, for http, whose paths match its decoded path), looked
# up in this index and listed in view order. So nothing here scans every
# rule or splits strings, and the first matching view is the answer:
# explicit denies beat allows whatever their order. A test that mocks
# data.rules must mock data.rule_index too, and build input.views from it:
# see index_of and views_for in fixtures_test.rego.
package egress.base

# refusal is the first refused fact of the request, whatever the rules
# say: a path flag (encoded_separator, double_encoding, encoded_dot,
# dot_segment, empty_segment, backslash, control_character,
# path_parameter, invalid_utf8), ip_obfuscated, userinfo or host_mismatch.
refusal := input.flags[0]

# reaches are the positions in input.views of the views whose port and
# identity match.
reaches contains i if {
	some i, r in input.views
	r.ports[input.port]
	object.get(r.identities, input.identity.id, r.any_identity)
}

# candidates are the indexes into data.rules of the rules whose hosts match
# input.host, for entry points whose facts carry input.host and
# input.host_suffixes ("a.b.c" → ["b.c", "c"]) rather than host_keys.
candidates contains i if {
	some i in data.rule_index.exact[input.host]
}

candidates contains i if {
	some suffix in input.host_suffixes
	some i in data.rule_index.wildcard[suffix]
}

candidates contains i if {
	ip := input.ip
	some c in data.rule_index.cidr
	net.cidr_contains(c.cidr, ip)
	some i in c.rules
}

# Helpers on data.rules entries (not views), for the other entry points.

is_deny(r) if r.action == "deny"

identity_ok(r) if not r.identities

identity_ok(r) if input.identity.id in r.identities

# host_wide rules restrict neither method nor path: only they open tunnels.
host_wide(r) if {
	not r.methods
	not r.paths
}

deny(reason, rule) := {"allow": false, "reason": reason, "rule": rule}

allow(rule) := {"allow": true, "reason": "allowed", "rule": rule}
