# syntax=docker/dockerfile:1
#
# egressd: the one binary, built with cgo (libpg_query) by deploy/build.sh,
# the same script CI and the e2e tests run, on a minimal non-root runtime.
#
#   docker build -t egressd .
#   docker run --read-only -p 127.0.0.1:3128:3128 -v egressd-audit:/var/lib/egressd/audit \
#     -v egressd-ca:/var/lib/egressd/ca egressd
#   curl -x http://127.0.0.1:3128 https://pypi.org/simple/
#
# With no file mounted it runs deploy/image/egressd.yaml: the embedded
# policy and defaults, the proxy on the container's interfaces, the audit
# log in the volume. Mount your own config over /etc/egressd/egressd.yaml.

# golang:*-bookworm ships gcc and libc6-dev, which cgo needs.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The context has no .git: pass what `egressd version` reports, e.g.
#   --build-arg EGRESSD_VERSION=$(git describe --tags --always --dirty)
#   --build-arg EGRESSD_COMMIT=$(git rev-parse HEAD)
# Unset, the binary reports version devel, commit unknown.
ARG EGRESSD_VERSION=""
ARG EGRESSD_COMMIT=""
RUN deploy/build.sh /out/egressd \
 && mkdir -p /out/audit \
 && mkdir -m 0700 /out/ca \
 && mkdir -m 0755 /out/roots

# distroless/cc: glibc and libgcc for the cgo binary, no shell, no package
# manager. The :nonroot tag runs as uid/gid 65532.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/egressd /usr/local/bin/egressd
# The audit and CA volumes are the only places egressd writes; the root
# filesystem can be mounted read-only. An empty directory owned by the
# runtime user makes a fresh named volume writable too (docker copies
# ownership and mode into it: the CA directory must stay 0700).
COPY --from=build --chown=65532:65532 /out/audit /var/lib/egressd/audit
COPY --from=build --chown=65532:65532 /out/ca /var/lib/egressd/ca
# Where `egressd ca export --out` writes identities' root certificates for
# sandboxes (compose's ca-init step mounts a volume here); certificates
# only, so 0755.
COPY --from=build --chown=65532:65532 /out/roots /var/lib/egressd/roots
COPY deploy/image/egressd.yaml /etc/egressd/egressd.yaml
USER 65532:65532
VOLUME ["/var/lib/egressd/audit", "/var/lib/egressd/ca"]

# proxy, DNS, Postgres gate, admin, metrics. DNS listens on 5353: a non-root process
# cannot bind 53 without CAP_NET_BIND_SERVICE, so Kubernetes maps Service
# port 53 to 5353 (compose instead lowers ip_unprivileged_port_start, because
# Docker's embedded resolver forwards only to port 53). The admin listener
# is bound to loopback by config validation; 9090 is listed for
# documentation and reached only from inside the container. 9091 is the
# metrics-only listener (metrics.listen), which Prometheus may scrape from
# outside.
EXPOSE 3128/tcp 5353/udp 5353/tcp 5432/tcp 9090/tcp 9091/tcp

# The admin listener is loopback-only, so the probe runs inside the
# container, as egressd itself (there is no shell or curl in the image).
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/egressd", "health", "--admin", "127.0.0.1:9090"]

ENTRYPOINT ["/usr/local/bin/egressd"]
CMD ["serve", "--config", "/etc/egressd/egressd.yaml"]
