# The CONNECT entry point. A rule that asks for inspection ("inspect":
# true) has the tunnel terminated: every request inside is then decided by
# egress.http, so its methods and paths apply. Otherwise the tunnel is
# opaque, so only a host-wide rule (no methods, no paths) opens one. Any
# deny rule for the host and port closes a tunnel either way, whatever
# methods or paths that deny names.
# An allowed decision carries "tls": when true the proxy must refuse a
# tunnel whose first bytes are not a TLS ClientHello (and one whose SNI
# names another host). A rule's "tls" defaults to true on every port: a
# plaintext tunnel is bound to nothing the proxy can check reliably (each
# HTTP request's Host is checked, but any other protocol passes), so
# a rule must ask for one with "tls": false. Plain HTTP to a port-80 host
# goes through the proxy path instead, decided request by request.
package egress.connect

import data.egress.base

# The refusal is input.flags[0] (base.refusal), read here directly: a
# rule reference costs an evaluation of its own. input.views are the views
# whose hosts match the tunnel's host, in view order (see base.rego).
decision := {"allow": false, "reason": reason, "rule": ""} if {
	reason := input.flags[0]
} else := {"allow": false, "reason": "rule_deny", "rule": r.id} if {
	r := input.views[min(tunnels)]
	r.deny
} else := {"allow": true, "reason": "allowed", "rule": r.id, "tls": true, "inspect": true} if {
	r := input.views[min(inspected)]
} else := {"allow": true, "reason": "allowed", "rule": r.id, "tls": object.get(r, "tls", true)} if {
	r := input.views[min(tunnels)]
} else := {"allow": false, "reason": "tunnel_needs_host_wide_rule", "rule": ""} if {
	count(base.reaches) > 0
} else := {"allow": false, "reason": "no_matching_rule", "rule": ""}

# tunnels are the positions in input.views of the views that decide a
# tunnel (the view's "tunnel": denies of any shape and host-wide allows)
# and reach it (base.reaches, spelled out: a rule reference costs an
# evaluation). min of no tunnels is undefined, so the branches above fail.
tunnels contains i if {
	some i, r in input.views
	r.tunnel
	r.ports[input.port]
	object.get(r.identities, input.identity.id, r.any_identity)
}

# inspected are the positions of the tunnels whose rule asks for
# inspection: when one reaches the tunnel it is terminated, even if a
# host-wide rule also reaches it (that rule then allows every request
# inside).
inspected contains i if {
	some i in tunnels
	input.views[i].inspect
}
