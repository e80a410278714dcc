#!/usr/bin/env bash
# What deploy/image/build.sh needs, installed only where missing: buildah
# and mmdebstrap for the layers, jq, and per architecture its Rust target
# and, for arm64 on an x86-64 host, Debian's cross linker and strip.
#
#   deploy/image/deps.sh ARCH...
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
host_arch=$(dpkg --print-architecture)
packages=(buildah mmdebstrap jq python3 binutils)
targets=()
for arch in "$@"; do
    [[ $arch == "$host_arch" ]] && continue
    case $arch in
    arm64)
        packages+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross binutils-aarch64-linux-gnu)
        targets+=(aarch64-unknown-linux-gnu)
        ;;
    amd64)
        packages+=(gcc-x86-64-linux-gnu libc6-dev-amd64-cross binutils-x86-64-linux-gnu)
        targets+=(x86_64-unknown-linux-gnu)
        ;;
    esac
done
"$repo/tests/vm/deps.sh" --only "${packages[@]}"
installed=$(rustup target list --installed)
for t in "${targets[@]}"; do
    grep -qx "$t" <<<"$installed" || rustup target add "$t"
done
