# syntax=docker/dockerfile:1
#
# egressd: the one binary, built with cgo (libpg_query) by deploy/build.sh,
# the same script CI and the e2e tests run, on a minimal non-root runtime.
#
#   docker build -t egressd .
#   docker run --read-only -v egressd-audit:/var/lib/egressd/audit \
#     -v egressd-ca:/var/lib/egressd/ca \
#     -v $PWD/deploy/compose/egressd.yaml:/etc/egressd/egressd.yaml:ro egressd

# golang:*-bookworm ships gcc and libc6-dev, which cgo needs.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN deploy/build.sh /out/egressd \
 && mkdir -p /out/audit \
 && mkdir -m 0700 /out/ca

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
USER 65532:65532
VOLUME ["/var/lib/egressd/audit", "/var/lib/egressd/ca"]

# proxy, DNS, Postgres gate, admin. DNS listens on 5353: a non-root process
# cannot bind 53 without CAP_NET_BIND_SERVICE, so Kubernetes maps Service
# port 53 to 5353 (compose instead lowers ip_unprivileged_port_start, because
# Docker's embedded resolver forwards only to port 53). The admin listener
# is bound to loopback by config validation; 9090 is listed for
# documentation and reached only from inside the container.
EXPOSE 3128/tcp 5353/udp 5353/tcp 5432/tcp 9090/tcp

# The admin listener is loopback-only, so the probe runs inside the
# container, as egressd itself (there is no shell or curl in the image).
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/egressd", "health", "--admin", "127.0.0.1:9090"]

ENTRYPOINT ["/usr/local/bin/egressd"]
CMD ["serve", "--config", "/etc/egressd/egressd.yaml"]
