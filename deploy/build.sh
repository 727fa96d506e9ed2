#!/usr/bin/env bash
# The one build of the egressd binary: the Dockerfile's build stage, CI and
# the tests (internal/egressdbin) all run this script, so the shipped binary
# is built with exactly the flags the tests exercised.
#
#   deploy/build.sh [OUTPUT]     (default: ./bin/egressd)
#   EGRESSD_VERSION=v1.2.3 EGRESSD_COMMIT=<sha> deploy/build.sh   (stamps; default: git's)
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
# `egressd version` and the egressd_build_info metric report these. From a
# checkout they come from git; the Docker build context has no .git, so the
# Dockerfile passes them in (docker build --build-arg EGRESSD_VERSION=…
# --build-arg EGRESSD_COMMIT=…), and without them the binary says devel.
version=${EGRESSD_VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo devel)}
commit=${EGRESSD_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
pkg=github.com/egressd/egressd/internal/version
# -trimpath: no builder paths in the binary; -buildvcs=false: the Docker
# build context has no .git (the commit is stamped above instead); -s -w: no
# symbol tables in the image.
exec go build -trimpath -buildvcs=false \
  -ldflags="-s -w -X $pkg.version=$version -X $pkg.commit=$commit" \
  -o "$out" ./cmd/egressd
