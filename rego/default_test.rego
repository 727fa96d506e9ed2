# Tests of the default rules in data.json. `egressd policy init` leaves this
# file out: an operator's data.json replaces the rules it asserts, while the
# other tests hold for any rules.
package egress.default_test

import data.egress.connect
import data.egress.fixtures
import data.egress.http

# HTTP: registries host-wide, read-only GitHub API paths.
test_default_http if {
	http.decision.allow with input as fixtures.http("GET", "pypi.org", 443, "/simple/requests/")
	http.decision.allow with input as fixtures.http("GET", "files.pythonhosted.org", 443, "/packages/x.whl")
	http.decision.allow with input as fixtures.http("GET", "registry.npmjs.org", 443, "/left-pad")
	http.decision.allow with input as fixtures.http("GET", "proxy.golang.org", 443, "/golang.org/x/net/@v/list")
	http.decision.allow with input as fixtures.http("GET", "deb.debian.org", 80, "/debian/dists/stable/Release")
	http.decision.allow with input as fixtures.http("GET", "api.github.com", 443, "/repos/o/r/contents/a")
	not http.decision.allow with input as fixtures.http("POST", "api.github.com", 443, "/repos/o/r/issues")
	not http.decision.allow with input as fixtures.http("GET", "api.github.com", 443, "/user")
	not http.decision.allow with input as fixtures.http("GET", "github.com", 443, "/")
	not http.decision.allow with input as fixtures.http("GET", "example.com", 443, "/")
}

# CONNECT: the host-wide rules open opaque tunnels; the read-only GitHub
# API rule asks for inspection, so its tunnel is terminated and its paths
# apply to the requests inside.
test_default_connect if {
	connect.decision.allow with input as fixtures.connect("pypi.org", 443)
	not connect.decision.inspect with input as fixtures.connect("pypi.org", 443)
	connect.decision.allow with input as fixtures.connect("api.github.com", 443)
	connect.decision.inspect with input as fixtures.connect("api.github.com", 443)
	connect.decision.rule == "github-api-read" with input as fixtures.connect("api.github.com", 443)
	connect.decision.reason == "no_matching_rule" with input as fixtures.connect("example.com", 443)
	connect.decision.reason == "no_matching_rule" with input as fixtures.connect("pypi.org", 22)
}

# No plaintext tunnel on port 80: apt's plain HTTP goes through the proxy
# path (test_default_http), and a CONNECT to the same host and port must
# carry TLS for that host.
test_default_no_plaintext_tunnel_on_port_80 if {
	d := connect.decision with input as fixtures.connect("deb.debian.org", 80)
	d.allow
	d.tls
	connect.decision.tls with input as fixtures.connect("security.debian.org", 80)
}
