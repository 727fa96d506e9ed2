# The CONNECT entry point. A tunnel cannot be inspected, so only a host-wide
# rule (no methods, no paths) opens one, and any deny rule for the host and
# port closes it, whatever methods or paths that deny names. An allowed
# decision carries "tls": when true the proxy must refuse a tunnel whose
# first bytes are not a TLS ClientHello. A rule's "tls" defaults to true on
# port 443 and false elsewhere.
package egress.connect

import data.egress.base

decision := base.deny(reason, "") if {
	reason := base.refusal
} else := base.deny("rule_deny", data.rules[i].id) if {
	count(denied) > 0
	i := min(denied)
} else := object.union(base.allow(r.id), {"tls": object.get(r, "tls", input.port == 443)}) if {
	count(allowed) > 0
	r := data.rules[min(allowed)]
} else := base.deny("tunnel_needs_host_wide_rule", "") if {
	count(scoped) > 0
} else := base.deny("no_matching_rule", "")

denied contains i if {
	some i in base.candidates
	r := data.rules[i]
	base.is_deny(r)
	input.port in r.ports
	base.identity_ok(r)
}

allowed contains i if {
	some i in base.candidates
	r := data.rules[i]
	not base.is_deny(r)
	base.host_wide(r)
	input.port in r.ports
	base.identity_ok(r)
}

# scoped are allow rules for the host and port that restrict methods or
# paths: they explain the deny but never open a tunnel.
scoped contains i if {
	some i in base.candidates
	r := data.rules[i]
	not base.is_deny(r)
	not base.host_wide(r)
	input.port in r.ports
	base.identity_ok(r)
}
