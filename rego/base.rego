# Shared rule matching for the http and connect entry points.
#
# Rules are data (data.rules); egressd indexes them by host when it loads the
# bundle and mounts the index at data.rule_index:
#   exact:    {"<host or canonical IP>": [rule index, …]}
#   wildcard: {"<suffix>": [rule index, …]}   from "*.<suffix>"
#   cidr:     [{"cidr": "<prefix>", "rules": [rule index, …]}]
# and computes per-request facts (input.host_suffixes, input.path_decoded,
# input.path_flags, …) so that no rule here scans every rule or splits
# strings. A test that mocks data.rules must mock data.rule_index too
# (see fixtures_test.rego).
package egress.base

# refusal is the first request fact that refuses a request whatever the
# rules say. Go lists path_flags in a fixed order, so the reason is stable.
refusal := flag if {
	flag := input.path_flags[0]
} else := "ip_obfuscated" if {
	input.ip_obfuscated
} else := "userinfo" if {
	input.userinfo
} else := "host_mismatch" if {
	input.host_mismatch
}

# candidates are the indexes of the rules whose hosts match input.host.
candidates contains i if {
	some i in data.rule_index.exact[input.host]
}

candidates contains i if {
	some suffix in input.host_suffixes
	some i in data.rule_index.wildcard[suffix]
}

candidates contains i if {
	some c in data.rule_index.cidr
	net.cidr_contains(c.cidr, input.ip)
	some i in c.rules
}

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
