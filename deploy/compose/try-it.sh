#!/bin/sh
# One look at egressd from the example sandbox: an allowed request, an
# inspected one (egressd terminates TLS with the sandbox's own root), a
# denied one, a denied SQL statement, and the audit records of all four.
# Run it from anywhere after
#   docker compose -f deploy/docker-compose.yaml up -d --build
# deploy/compose_test.go (TestTryIt) runs each sandbox command's decision
# through `egressd check` with this compose's config and policy: a step
# says "allowed" or "denied", and egressd must agree.
set -u
compose="docker compose -f $(dirname "$0")/../docker-compose.yaml"
sandbox() { $compose exec -T sandbox "$@"; }
step() { printf '\n== %s\n' "$1"; }

step "allowed: pypi.org over HTTPS (rule pypi is host-wide, so it opens a tunnel)"
sandbox curl -sS -o /dev/null -w 'HTTP %{http_code}\n' https://pypi.org/simple/
step "allowed: api.github.com over HTTPS, inspected (rule github-api-read): the sandbox trusts agent-1's root"
sandbox curl -sS -o /dev/null -w 'HTTP %{http_code}\n' https://api.github.com/rate_limit
step "denied: example.com (no rule names it)"
sandbox curl -sS -i http://example.com/
step "denied: a write under agent-1's read_only SQL profile"
sandbox psql -c 'DELETE FROM users'
step "the audit records of all four"
$compose exec -T egressd egressd audit show --table --identity agent-1 --since 10m /var/lib/egressd/audit
