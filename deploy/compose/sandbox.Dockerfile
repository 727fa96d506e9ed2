# The example sandbox of deploy/docker-compose.yaml: the tools an agent
# would use (curl, psql, python3) and no egressd software, only settings
# (the compose file's environment and dns).
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl postgresql-client python3 \
 && rm -rf /var/lib/apt/lists/*
USER 1000:1000
CMD ["sleep", "infinity"]
