#!/usr/bin/env bash
# Makes debian:bookworm-slim in buildah's storage, once, from Debian's
# packages: no image registry is reachable here. As the official image:
# merged /usr without the usrmerge package (and the perl it pulls in), no
# documentation, and apt configured to keep no package caches in later
# layers (its docker-clean file). The node's images (images.sh) and the
# e2e suite's (tests/k8s-e2e/build.sh) are built on it.
#
#   tests/node-e2e/base-image.sh SCRATCH_DIR   prints the image's name
set -euo pipefail

base=docker.io/library/debian:bookworm-slim
scratch=${1:?usage: $0 SCRATCH_DIR}

if ! buildah inspect --type image "$base" >/dev/null 2>&1; then
    printf '%s base-image: making %s from Debian'"'"'s packages (mmdebstrap)\n' \
        "$(date -u +%H:%M:%S)" "$base" >&2
    mkdir -p "$scratch"
    tar=$scratch/base.tar
    conf=$scratch/apt-conf
    rm -rf "$conf"
    mkdir -p "$conf"
    clean='"rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true";'
    cat >"$conf/docker-clean" <<EOF
DPkg::Post-Invoke { $clean };
APT::Update::Post-Invoke { $clean };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
    mmdebstrap --quiet --variant=minbase --mode=root --format=tar \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        --customize-hook="copy-in $conf/docker-clean /etc/apt/apt.conf.d" \
        --customize-hook='rm -f "$1"/var/cache/apt/*.bin' \
        bookworm "$tar" http://deb.debian.org/debian
    ctr=$(buildah from scratch)
    buildah add --quiet "$ctr" "$tar" / >/dev/null
    buildah config --cmd bash "$ctr"
    buildah commit --quiet "$ctr" "$base" >/dev/null
    buildah rm "$ctr" >/dev/null
    rm -rf "$tar" "$conf"
fi
echo "$base"
