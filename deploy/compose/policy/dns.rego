# The DNS entry point: which names the sandbox-facing DNS server answers.
#
# A name is answered when some allow rule in data.rules could match it as a
# host (exact host, or a strict subdomain of a "*.x" wildcard; CIDR hosts
# name no DNS name), or when data.dns.names lists it (exact or "*.x"). Only
# the record types in data.dns.qtypes are answered; egressd itself never
# answers more than A, AAAA and CNAME. Deny rules are not consulted: they
# may be scoped to ports, methods or paths, and the proxy enforces them.
#
# Go supplies input.name (lower-case, no trailing dot), input.host (the same
# name, so data.rule_index applies), input.host_suffixes and input.qtype.
package egress.dns

import data.egress.base

qtypes := q if {
	q := data.dns.qtypes
} else := ["A", "AAAA", "CNAME"]

extra_names := n if {
	n := data.dns.names
} else := []

decision := base.deny("qtype_not_allowed", "") if {
	not input.qtype in qtypes
} else := base.allow(data.rules[min(allowed)].id) if {
	count(allowed) > 0
} else := base.allow("dns.names") if {
	listed
} else := base.deny("no_matching_rule", "")

allowed contains i if {
	some i in base.candidates
	r := data.rules[i]
	not base.is_deny(r)
	base.identity_ok(r)
}

listed if input.name in extra_names

listed if {
	some suffix in input.host_suffixes
	concat("", ["*.", suffix]) in extra_names
}
