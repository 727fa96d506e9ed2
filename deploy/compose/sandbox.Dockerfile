# The example sandbox of deploy/docker-compose.yaml: the tools an agent
# would use (curl, psql, python3) and no egressd software, only settings
# (the compose file's environment and dns).
#
# HTTPS inspection: no root is baked in. At start the entrypoint writes
# SSL_CERT_FILE as the system bundle plus the identity's root, read from
# EGRESSD_ROOT (the compose file mounts the egressd-roots volume there), so
# curl, Python's ssl and requests trust both the public roots (tunnelled
# hosts) and egressd's root (inspected ones); a rotated root takes effect
# at the next start. Without EGRESSD_ROOT nothing is added.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl postgresql-client python3 \
 && rm -rf /var/lib/apt/lists/*
USER 1000:1000
ENTRYPOINT ["/bin/sh", "-c", "set -eu; if [ -n \"${EGRESSD_ROOT:-}\" ]; then cat /etc/ssl/certs/ca-certificates.crt \"$EGRESSD_ROOT\" > \"$SSL_CERT_FILE\"; fi; exec \"$@\"", "sandbox-start"]
CMD ["sleep", "infinity"]
