#!/bin/sh
# Build POLICY_DIR into a bundle signed with SIGNING_KEY, in the format
# `opa build --signing-key` writes, and put it where the bundle service
# (bundle-server.yaml) serves it:
#   ConfigMap egressd-bundle: egress.tar.gz, the signed bundle
#   ConfigMap egressd-bundle-trust: public.pem (SIGNING_KEY's public half)
#     and server.crt (the service's certificate), which egressd mounts
#   Secret egressd-bundle-tls: the service's TLS pair, made on the first run
#     only
#
#   deploy/kubernetes-bundle-service/bundle.sh SIGNING_KEY POLICY_DIR
#
# Make the signing key once, and keep it out of git and of the cluster:
#   openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out signing.pem
# Run it again with an edited POLICY_DIR to roll out a new revision (the
# time, UTC): every replica takes it at its next poll, after compiling it
# and running its Rego tests; one that fails is refused and the revision in
# force stays. Needs opa, openssl and kubectl on PATH. A new SIGNING_KEY
# takes a restart of egressd (it reads the public key at start).
set -eu
[ $# -eq 2 ] || { echo "usage: $0 SIGNING_KEY POLICY_DIR" >&2; exit 2; }
key=$1 dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rev=$(date -u +%Y%m%dT%H%M%SZ)
opa build --bundle "$dir" --signing-key "$key" --signing-alg RS256 --revision "$rev" --output "$work/egress.tar.gz"
openssl pkey -in "$key" -pubout -out "$work/public.pem"
svc=egressd-bundles.egressd.svc.cluster.local
crt=$(kubectl -n egressd get secret egressd-bundle-tls -o jsonpath='{.data.tls\.crt}')
if [ -n "$crt" ]; then
	printf %s "$crt" | base64 -d >"$work/server.crt"
else
	openssl req -x509 -newkey rsa:2048 -nodes -days 825 -subj "/CN=$svc" -addext "subjectAltName=DNS:$svc" \
		-keyout "$work/tls.key" -out "$work/server.crt" 2>/dev/null
	# replace, not apply: the placeholders exist (kubectl apply -k), and a
	# later `kubectl apply -k` then leaves the data it does not mention.
	kubectl -n egressd create secret generic egressd-bundle-tls \
		--from-file=tls.crt="$work/server.crt" --from-file=tls.key="$work/tls.key" --dry-run=client -o yaml | kubectl replace -f -
	kubectl -n egressd rollout restart deployment/egressd-bundles
fi
kubectl -n egressd create configmap egressd-bundle-trust \
	--from-file=public.pem="$work/public.pem" --from-file=server.crt="$work/server.crt" --dry-run=client -o yaml | kubectl replace -f -
kubectl -n egressd create configmap egressd-bundle \
	--from-file=egress.tar.gz="$work/egress.tar.gz" --dry-run=client -o yaml | kubectl replace -f -
echo "bundle revision $rev is served; egressd replicas take it within policy.bundle_poll_max"
