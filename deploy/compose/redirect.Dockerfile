# The image of compose's sandbox-redirect step: nft and ip, nothing else.
# It runs once in the sandbox's network namespace with NET_ADMIN, before the
# sandbox starts, so the sandbox image needs neither tool nor capability.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends iproute2 nftables \
 && rm -rf /var/lib/apt/lists/*
