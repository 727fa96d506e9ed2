#!/usr/bin/env bash
# The one build of the egressd binary: the Dockerfile's build stage, CI and
# the e2e tests all run this script, so the shipped binary is built with
# exactly the flags the tests exercised.
#
#   deploy/build.sh [OUTPUT]     (default: ./bin/egressd)
#
# cgo is required: the Postgres gate parses SQL with libpg_query.
set -euo pipefail
# OUTPUT is relative to the caller's directory, not the repository's.
out=${1:-}
if [ -n "$out" ]; then
  out=$(realpath -m -- "$out")
fi
cd "$(dirname "$0")/.."
out=${out:-bin/egressd}
export CGO_ENABLED=1
# -trimpath: no builder paths in the binary; -buildvcs=false: the Docker
# build context has no .git; -s -w: no symbol tables in the image.
exec go build -trimpath -buildvcs=false -ldflags='-s -w' -o "$out" ./cmd/egressd
