package egress.connect_test

import data.egress.connect
import data.egress.fixtures

decide(req) := d if {
	d := connect.decision with input as req
		with data.rules as fixtures.rules
		with data.rule_index as fixtures.index
}

test_host_wide_rule_opens_a_tunnel if {
	d := decide(fixtures.connect("a.wild.test", 443))
	d.allow
	d.rule == "wild"
	d.reason == "allowed"
	d.tls
}

test_path_or_method_rule_never_opens_a_tunnel if {
	d := decide(fixtures.connect("api.test", 443))
	not d.allow
	d.reason == "tunnel_needs_host_wide_rule"
	decide(fixtures.connect("post.test", 443)).reason == "tunnel_needs_host_wide_rule"
}

test_any_deny_closes_the_tunnel if {
	# deny-path only names /admin/**, but a tunnel cannot be inspected, so
	# it closes exact.test:443 despite the host-wide allow.
	d := decide(fixtures.connect("exact.test", 443))
	not d.allow
	d.reason == "rule_deny"
	d.rule == "deny-path"
	decide(fixtures.connect("bad.mixed.test", 443)).rule == "deny-one"
	decide(fixtures.connect("good.mixed.test", 443)).allow
}

test_port_must_be_listed if {
	decide(fixtures.connect("exact.test", 8443)).reason == "no_matching_rule"
	decide(fixtures.connect("ports.test", 8443)).allow
}

# TLS-only unless the rule says otherwise, on every port: a plaintext
# tunnel to a port-80 host could carry a request for any other host the
# server answers for.
test_tls_defaults_and_overrides if {
	decide(fixtures.connect("ports.test", 8443)).tls
	decide(fixtures.connect("ports.test", 80)).tls
	not decide(fixtures.connect("ssh.test", 22)).tls
	decide(fixtures.connect("db.test", 5432)).tls
	decide(fixtures.connect("a.wild.test", 443)).tls
}

test_wildcard_and_cidr if {
	decide(fixtures.connect("a.wild.test", 443)).allow
	not decide(fixtures.connect("wild.test", 443)).allow
	decide(object.union(fixtures.connect("198.51.100.1", 443), {"ip": "198.51.100.1", "host_keys": ["198.51.100.1"]})).allow
}

test_identity_scoped if {
	not decide(fixtures.connect("team.test", 443)).allow
	decide(object.union(fixtures.connect("team.test", 443), {"identity": {"id": "team", "attributes": {}}})).allow
}

test_obfuscated_ip_refused if {
	req := object.union(fixtures.connect("192.0.2.7", 443), {"ip": "192.0.2.7", "host_keys": ["192.0.2.7"], "flags": ["ip_obfuscated"]})
	d := decide(req)
	not d.allow
	d.reason == "ip_obfuscated"
}

# A rule with "inspect" terminates the tunnel though it names methods and
# paths; the decision says so, and the tunnel must carry TLS.
test_inspect_rule_terminates_the_tunnel if {
	d := decide(fixtures.connect("inspect.test", 443))
	d.allow
	d.rule == "inspected"
	d.inspect
	d.tls
}

# An inspect rule wins over a host-wide rule reaching the same tunnel: the
# requests inside are then decided one by one (and the host-wide rule
# allows them all).
test_inspect_beats_host_wide if {
	d := decide(fixtures.connect("both.test", 443))
	d.allow
	d.rule == "both-inspect"
	d.inspect
}

test_host_wide_tunnel_is_not_inspected if {
	d := decide(fixtures.connect("ports.test", 8443))
	d.allow
	not d.inspect
	not decide(fixtures.connect("a.wild.test", 443)).inspect
}
