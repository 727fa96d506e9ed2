package egress.dns_test

import data.egress.dns

rules := [
	{"id": "pypi", "hosts": ["pypi.org"], "ports": [443]},
	{"id": "wild", "hosts": ["*.example.com"], "ports": [443]},
	{"id": "team-only", "hosts": ["team.example.org"], "ports": [443], "identities": ["team"]},
	{"id": "blocked", "hosts": ["blocked.example.net"], "ports": [443], "action": "deny"},
	{"id": "net", "hosts": ["10.0.0.0/8"], "ports": [443]},
]

index := {
	"exact": {"pypi.org": [0], "team.example.org": [2], "blocked.example.net": [3]},
	"wildcard": {"example.com": [1]},
	"cidr": [{"cidr": "10.0.0.0/8", "rules": [4]}],
}

q(name, qtype, id) := {
	"kind": "dns",
	"identity": {"id": id},
	"name": name,
	"host": name,
	"host_suffixes": suffixes(name),
	"qtype": qtype,
}

suffixes(name) := [concat(".", array.slice(parts, i, count(parts))) |
	parts := split(name, ".")
	some i in numbers.range(1, count(parts) - 1)
]

decide(name, qtype, id) := d if {
	d := dns.decision with input as q(name, qtype, id)
		with data.rules as rules
		with data.rule_index as index
		with data.dns as {"names": ["extra.internal.test", "*.svc.test"], "qtypes": ["A", "AAAA", "CNAME"]}
}

test_exact_host_rule if {
	d := decide("pypi.org", "A", "a")
	d.allow
	d.rule == "pypi"
}

test_wildcard_matches_subdomain if {
	d := decide("files.example.com", "AAAA", "a")
	d.allow
	d.rule == "wild"
	decide("a.b.example.com", "A", "a").allow
}

test_wildcard_does_not_match_apex if {
	d := decide("example.com", "A", "a")
	not d.allow
	d.reason == "no_matching_rule"
}

test_unknown_name_denied if {
	d := decide("attacker.test", "A", "a")
	not d.allow
	d.reason == "no_matching_rule"
	d.rule == ""
}

test_identity_scoped_rule if {
	decide("team.example.org", "A", "team").allow
	not decide("team.example.org", "A", "other").allow
}

test_deny_rule_opens_nothing if {
	not decide("blocked.example.net", "A", "a").allow
}

test_cidr_rule_names_no_dns_name if {
	not decide("10.0.0.1.nip.test", "A", "a").allow
}

test_extra_names if {
	d := decide("extra.internal.test", "A", "a")
	d.allow
	d.rule == "dns.names"
	decide("api.svc.test", "A", "a").allow
	not decide("svc.test", "A", "a").allow
}

test_qtypes if {
	decide("pypi.org", "CNAME", "a").allow
	d := decide("pypi.org", "TXT", "a")
	not d.allow
	d.reason == "qtype_not_allowed"
	not decide("pypi.org", "ANY", "a").allow
	not decide("pypi.org", "NULL", "a").allow
}

test_default_qtypes_without_dns_data if {
	d := dns.decision with input as q("pypi.org", "MX", "a")
		with data.rules as rules
		with data.rule_index as index
		with data.dns as {}
	d.reason == "qtype_not_allowed"
	a := dns.decision with input as q("pypi.org", "AAAA", "a")
		with data.rules as rules
		with data.rule_index as index
		with data.dns as {}
	a.allow
}
