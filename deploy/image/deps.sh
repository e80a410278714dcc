#!/usr/bin/env bash
# What deploy/image/build.sh needs, installed only where missing: buildah
# and mmdebstrap for the layers, jq, and per architecture its Rust target
# and, for arm64 on an x86-64 host, Debian's cross linker and strip.
#
#   deploy/image/deps.sh ARCH...
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=arch.sh
source "$repo/deploy/image/arch.sh"
host_arch=$(dpkg --print-architecture)
packages=(buildah mmdebstrap jq python3 binutils)
targets=()
for arch in "$@"; do
    [[ $arch == "$host_arch" ]] && continue
    gnu=$(gnu_triple "$arch")
    packages+=("gcc-${gnu//_/-}" "libc6-dev-$arch-cross" "binutils-${gnu//_/-}")
    targets+=("$(rust_triple "$arch")")
done
"$repo/tests/vm/deps.sh" --only "${packages[@]}"
installed=$(rustup target list --installed)
for t in "${targets[@]}"; do
    grep -qx "$t" <<<"$installed" || rustup target add "$t"
done
