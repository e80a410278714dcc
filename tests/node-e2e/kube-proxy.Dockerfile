# Upstream kube-proxy's image for the migration test, built here from the
# binary build-k8s.sh made (no registry can be reached): what registry.k8s.io's
# image holds that IPVS mode uses (iptables with the backend-picking wrapper,
# ipset, conntrack), on the same Debian base as ours. Context: a folder with
# kube-proxy and iptables-wrapper (tests/node-e2e/images.sh).
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends iptables ipset conntrack kmod \
    && rm -rf /var/lib/apt/lists/*
COPY iptables-wrapper /usr/sbin/iptables-wrapper
RUN iptables-wrapper --install
COPY kube-proxy /usr/local/bin/kube-proxy
