#!/bin/sh
# Make the shared per-identity roots of HTTPS inspection and put them where
# the example mounts them (roots.yaml):
#   Secret egressd-ca, namespace egressd: <id>.crt and <id>.key of every
#     identity, mounted read-only into every egressd replica
#   ConfigMap egressd-roots, namespace sandboxes: <id>.crt only, which each
#     sandbox reads at start
# then restart egressd so every replica loads them.
#
#   deploy/kubernetes/roots.sh agent-1 [ID...]   # every identity of config.yaml
#
# Ids must be lower-case letters, digits, '-' and '.' (their file names in
# the CA directory). EGRESSD names the egressd command (default: egressd
# on PATH). Running it again makes new roots: that is rotation (README,
# Kubernetes, "Shared roots").
set -eu
[ $# -gt 0 ] || { echo "usage: $0 ID [ID...]" >&2; exit 2; }
egressd=${EGRESSD:-egressd}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
$egressd ca init "$work/ca" >/dev/null
keys="" certs=""
for id in "$@"; do
	$egressd ca export --ca-dir "$work/ca" --identity "$id" --out "$work/$id.crt"
	keys="$keys --from-file=$work/ca/$id.crt --from-file=$work/ca/$id.key"
	certs="$certs --from-file=$work/$id.crt"
done
# replace, not apply: the objects exist (kubectl apply -k made the
# placeholders), and replace drops apply's last-applied record, so a later
# `kubectl apply -k` leaves the data it does not mention alone.
# shellcheck disable=SC2086 # the --from-file lists are meant to split
kubectl -n egressd create secret generic egressd-ca $keys --dry-run=client -o yaml | kubectl replace -f -
# shellcheck disable=SC2086
kubectl -n sandboxes create configmap egressd-roots $certs --dry-run=client -o yaml | kubectl replace -f -
kubectl -n egressd rollout restart statefulset/egressd
