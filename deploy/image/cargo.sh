#!/usr/bin/env bash
# cargo for one of the image's architectures, from this machine: the host's
# own natively (target/PROFILE, shared with every other build here), the
# other through its Rust target and Debian's cross linker
# (target/TRIPLE/PROFILE). cargo's output goes to stderr; the folder the
# artifacts are in is printed.
#
#   deploy/image/cargo.sh ARCH PROFILE CARGO_ARGS...   ARCH: amd64, arm64
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
arch=${1:?usage: $0 ARCH PROFILE CARGO_ARGS...}
profile=${2:?usage: $0 ARCH PROFILE CARGO_ARGS...}
shift 2
# shellcheck source=arch.sh
source "$repo/deploy/image/arch.sh"
triple=$(rust_triple "$arch") && gnu=$(gnu_triple "$arch") || {
    echo "cargo.sh: unknown architecture $arch (amd64 or arm64)" >&2
    exit 64
}
target=${CARGO_TARGET_DIR:-$repo/target}
case $target in /*) ;; *) target=$repo/$target ;; esac
dir=$profile
[[ $profile == dev ]] && dir=debug

"$repo/deploy/image/deps.sh" "$arch"
cd "$repo"
if [[ $arch == "$(dpkg --print-architecture)" ]]; then
    cargo build --profile "$profile" "$@" >&2
    echo "$target/$dir"
else
    linker=CARGO_TARGET_$(tr 'a-z-' 'A-Z_' <<<"$triple")_LINKER
    export "$linker=$gnu-gcc"
    cargo build --profile "$profile" --target "$triple" "$@" >&2
    echo "$target/$triple/$dir"
fi
