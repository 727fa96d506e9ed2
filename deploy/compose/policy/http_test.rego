package egress.http_test

import data.egress.fixtures
import data.egress.http

# decide runs egress.http on the fixture rules.
decide(req) := d if {
	d := http.decision with input as req
		with data.rules as fixtures.rules
		with data.rule_index as fixtures.index
}

get(host, path) := fixtures.http("GET", host, 443, path)

allowed_by(req, rule) if {
	d := decide(req)
	d.allow
	d.rule == rule
	d.reason == "allowed"
}

denied_for(req, reason) if {
	d := decide(req)
	not d.allow
	d.reason == reason
}

test_exact_host_any_method_any_path if {
	allowed_by(get("exact.test", "/anything/at/all"), "exact")
	allowed_by(fixtures.http("DELETE", "exact.test", 443, "/"), "exact")
}

test_port_must_be_listed if {
	denied_for(fixtures.http("GET", "exact.test", 80, "/"), "no_matching_rule")
	allowed_by(fixtures.http("GET", "ports.test", 80, "/"), "two-ports")
	allowed_by(fixtures.http("GET", "ports.test", 8443, "/"), "two-ports")
	denied_for(fixtures.http("GET", "ports.test", 443, "/"), "no_matching_rule")
}

test_wildcard_matches_subdomains_only if {
	allowed_by(get("a.wild.test", "/"), "wild")
	allowed_by(get("a.b.wild.test", "/"), "wild")
	denied_for(get("wild.test", "/"), "no_matching_rule")
	denied_for(get("evilwild.test", "/"), "no_matching_rule")
}

test_methods_and_paths if {
	allowed_by(get("api.test", "/v1/x/items"), "read-only")
	allowed_by(fixtures.http("HEAD", "api.test", 443, "/v2/a/b/c"), "read-only")
	denied_for(fixtures.http("POST", "api.test", 443, "/v1/x/items"), "no_matching_rule")
	denied_for(get("api.test", "/v1/x/y/items"), "no_matching_rule")
	denied_for(get("api.test", "/v1/items"), "no_matching_rule")
	denied_for(get("api.test", "/v3/x"), "no_matching_rule")
}

test_methods_only if {
	allowed_by(fixtures.http("POST", "post.test", 443, "/any"), "methods-only")
	denied_for(get("post.test", "/any"), "no_matching_rule")
}

test_identity_scoped_rule if {
	req := get("team.test", "/")
	denied_for(req, "no_matching_rule")
	allowed_by(object.union(req, {"identity": {"id": "team", "attributes": {}}}), "team-only")
}

test_ip_and_cidr_hosts if {
	allowed_by(object.union(get("192.0.2.7", "/"), {"ip": "192.0.2.7", "host_keys": ["192.0.2.7"]}), "ip")
	allowed_by(object.union(get("2001:db8::7", "/"), {"ip": "2001:db8::7", "host_keys": ["2001:db8::7"]}), "ip")
	allowed_by(object.union(get("198.51.100.9", "/"), {"ip": "198.51.100.9", "host_keys": ["198.51.100.9"]}), "cidr")
	denied_for(object.union(get("198.51.101.9", "/"), {"ip": "198.51.101.9", "host_keys": ["198.51.101.9"]}), "no_matching_rule")
}

test_explicit_deny_beats_allow if {
	denied_for(get("bad.mixed.test", "/"), "rule_deny")
	decide(get("bad.mixed.test", "/")).rule == "deny-one"
	allowed_by(get("good.mixed.test", "/"), "wild-allow")
}

test_path_scoped_deny if {
	denied_for(get("exact.test", "/admin/users"), "rule_deny")
	allowed_by(get("exact.test", "/public"), "exact")
}

# A deny matches the path in any case and without the trailing dots and
# spaces of a segment, as a Windows-backed server reads it.
test_path_deny_windows_form if {
	denied_for(get("exact.test", "/ADMIN./users"), "rule_deny")
	denied_for(get("exact.test", "/admin /users"), "rule_deny")
	allowed_by(get("exact.test", "/admin.x/users"), "exact")
}

test_redirect_uses_the_same_rules if {
	allowed_by(object.union(get("exact.test", "/"), {"kind": "redirect"}), "exact")
	denied_for(object.union(get("nowhere.test", "/"), {"kind": "redirect"}), "no_matching_rule")
}

test_unknown_host_denied if {
	denied_for(get("nowhere.test", "/"), "no_matching_rule")
}

test_every_flag_refuses_whatever_the_rules if {
	every flag in [
		"encoded_separator", "double_encoding", "encoded_dot", "dot_segment",
		"empty_segment", "backslash", "control_character", "path_parameter",
		"invalid_utf8", "ip_obfuscated", "userinfo", "host_mismatch",
	] {
		denied_for(object.union(get("exact.test", "/"), {"flags": [flag]}), flag)
	}
}

test_first_flag_is_the_reason if {
	denied_for(object.union(get("exact.test", "/"), {"flags": ["dot_segment", "userinfo"]}), "dot_segment")
}
