# Test fixtures for the http and connect tests: a rule of every shape, and
# index_of, which builds data.rule_index from rules exactly as egressd does
# at load (policy/index.go). test_index_of_matches_loaded_index
# (default_test.rego, and policy's TestShippedTestsPassOnAnyRules over other
# rules) keeps the two in step.
package egress.fixtures

rules := [
	{"id": "exact", "hosts": ["exact.test"], "ports": [443]},
	{"id": "two-ports", "hosts": ["ports.test"], "ports": [80, 8443]},
	{"id": "wild", "hosts": ["*.wild.test"], "ports": [443]},
	{"id": "read-only", "hosts": ["api.test"], "ports": [443], "methods": ["GET", "HEAD"], "paths": ["/v1/*/items", "/v2/**"]},
	{"id": "methods-only", "hosts": ["post.test"], "ports": [443], "methods": ["POST"]},
	{"id": "team-only", "hosts": ["team.test"], "ports": [443], "identities": ["team"]},
	{"id": "ip", "hosts": ["192.0.2.7", "2001:db8::7"], "ports": [443]},
	{"id": "cidr", "hosts": ["198.51.100.0/24"], "ports": [443]},
	{"id": "plain-tunnel", "hosts": ["ssh.test"], "ports": [22], "tls": false},
	{"id": "tls-tunnel", "hosts": ["db.test"], "ports": [5432], "tls": true},
	{"id": "wild-allow", "hosts": ["*.mixed.test"], "ports": [443]},
	{"id": "deny-one", "hosts": ["bad.mixed.test"], "ports": [443], "action": "deny"},
	{"id": "deny-path", "hosts": ["exact.test"], "ports": [443], "paths": ["/admin/**"], "action": "deny"},
	{"id": "inspected", "hosts": ["inspect.test"], "ports": [443], "methods": ["GET"], "paths": ["/ok/**"], "inspect": true},
	{"id": "both-wide", "hosts": ["both.test"], "ports": [443]},
	{"id": "both-inspect", "hosts": ["both.test"], "ports": [443], "paths": ["/x/**"], "inspect": true},
]

index_of(rs) := {
	"views": [view(rs[i], i) | some i in order],
	"hosts": {h: [v | some v, i in order; h in rs[i].hosts] | some h in names},
	"cidr_views": [{"cidr": c, "rules": [v | some v, i in order; c in rs[i].hosts]} | some c in cidrs],
	"exact": {h: [i | some i, r in rs; h in r.hosts] | some h in names; not startswith(h, "*.")},
	"wildcard": {substring(h, 2, -1): [i | some i, r in rs; h in r.hosts] | some h in names; startswith(h, "*.")},
	"cidr": [{"cidr": c, "rules": [i | some i, r in rs; c in r.hosts]} | some c in cidrs],
} if {
	order := array.concat([i | some i, r in rs; r.action == "deny"], [i | some i, r in rs; not r.action == "deny"])
	names := {h | some r in rs; some h in r.hosts; not contains(h, "/")}
	cidrs := {h | some r in rs; some h in r.hosts; contains(h, "/")}
}

view(r, i) := object.union(view_base(r, i), {"tls": r.tls}) if {
	is_boolean(r.tls)
} else := view_base(r, i)

view_base(r, i) := {
	"id": r.id,
	"index": i,
	"deny": is_deny(r),
	"host_wide": host_wide(r),
	"tunnel": tunnel(r),
	"inspect": object.get(r, "inspect", false),
	"ports": {p | some p in r.ports},
	"methods": {m: true | some m in object.get(r, "methods", [])},
	"any_method": count(object.get(r, "methods", [])) == 0,
	"identities": {id: true | some id in object.get(r, "identities", [])},
	"any_identity": count(object.get(r, "identities", [])) == 0,
	"paths": paths(r),
	"decision": decision(r),
}

is_deny(r) := true if r.action == "deny"
else := false

host_wide(r) := true if {
	not r.methods
	not r.paths
} else := false

tunnel(r) := true if is_deny(r)
else := true if r.inspect
else := host_wide(r)

paths(r) := r.paths if count(object.get(r, "paths", [])) > 0
else := ["**"]

decision(r) := {"allow": false, "reason": "rule_deny", "rule": r.id} if is_deny(r)
else := {"allow": true, "reason": "allowed", "rule": r.id}

index := index_of(rules)

# loaded_rules is data.rules as loaded, [] when data.json has none.
default loaded_rules := []

loaded_rules := data.rules

# http and connect build the input egressd would for a request on the
# fixture rules; the facts Go computes (host_keys, flags, views) are spelled
# out by the caller, the views by views_in from the fixture index only. The
# shipped tests use them with data.rules and data.rule_index mocked, so they
# pass whatever the operator's data.json holds. loaded_http and
# loaded_connect take the views from the loaded data.rule_index instead, for
# the tests of the default rules (default_test.rego).
http(method, host, port, path) := http_in(index, method, host, port, path)

connect(host, port) := connect_in(index, host, port)

loaded_http(method, host, port, path) := http_in(data.rule_index, method, host, port, path)

loaded_connect(host, port) := connect_in(data.rule_index, host, port)

http_in(x, method, host, port, path) := {
	"kind": "http",
	"identity": {"id": "anonymous", "attributes": {}},
	"method": method,
	"scheme": "https",
	"host": host,
	"host_keys": host_keys(host),
	"port": port,
	"path": path,
	"path_decoded": path,
	"flags": [],
	"views": views_in(x, host, path),
}

connect_in(x, host, port) := {
	"kind": "connect",
	"identity": {"id": "anonymous", "attributes": {}},
	"host": host,
	"host_keys": host_keys(host),
	"port": port,
	"flags": [],
	"views": views_in(x, host, null),
}

# views_in is input.views as egressd computes it (policy/views.go): the
# views of index x whose hosts match host by key or CIDR and, unless path
# is null, whose path globs match path, in view order.
views_in(x, host, path) := [x.views[v] | some v in sort({v | some v in host_views(x, host); path_ok(x.views[v], path)})]

host_views(x, host) := {v | some key in host_keys(host); some v in x.hosts[key]} | {v |
	regex.match(`^[0-9.]+$|:`, host)
	some c in x.cidr_views
	net.cidr_contains(c.cidr, host)
	some v in c.rules
}

path_ok(_, null)

path_ok(r, path) if {
	some p in r.paths
	some form in forms(r, path)
	glob.match(fold(r, p), ["/"], form)
}

# "/p/**" also matches "/p" itself.
path_ok(r, path) if {
	some p in r.paths
	endswith(p, "/**")
	root := trim_suffix(p, "/**")
	root != ""
	some form in forms(r, path)
	glob.match(fold(r, root), ["/"], form)
}

# Deny rules match paths in any case.
fold(r, s) := lower(s) if r.deny
else := s

# Deny rules also match the path as a Windows-backed server reads it,
# without the trailing dots and spaces of each segment (windowsForm).
forms(r, path) := {lower(path), windows_form(lower(path))} if r.deny
else := {path}

windows_form(p) := w if {
	w := concat("/", [t |
		some seg in split(p, "/")
		t := trim_right(seg, ". ")
		not dropped(seg, t)
	])
	w != ""
} else := "/"

dropped(seg, t) if {
	t == ""
	seg != ""
}

host_keys(host) := array.concat([host], [concat("", ["*.", concat(".", array.slice(parts, i, count(parts)))]) |
	parts := split(host, ".")
	some i in numbers.range(1, count(parts) - 1)
	i > 0
	i < count(parts)
])

test_host_keys if {
	host_keys("a.b.c") == ["a.b.c", "*.b.c", "*.c"]
	host_keys("c") == ["c"]
}
