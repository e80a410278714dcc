#!/usr/bin/env bash
# Builds deploy/Dockerfile's image for linux/amd64 and linux/arm64 without
# a registry and without running a single arm64 instruction, into one OCI
# archive whose index holds both:
#
#   deploy/image/build.sh [ARCH...]        ARCH: amd64, arm64 (default: both)
#
# writes target/image/kube-ipvs-proxy.oci.tar (`skopeo copy
# oci-archive:...`, `podman load`, `ctr images import` read it) and
# checks it: an index with one manifest per architecture, each holding the
# proxy built for that architecture (its ELF header), the labels, the
# entrypoint. Each stage does what the Dockerfile's does:
#
#   builder   `cargo build --release --locked` on the host, for each
#             architecture's Rust target (the cross linker from Debian's
#             gcc-aarch64-linux-gnu), stripped
#   runtime   Debian 12 (bookworm, with its updates and security suites)
#             minbase plus iptables, as debian:12-slim plus the
#             Dockerfile's `apt-get install`: made by mmdebstrap in
#             chrootless mode, which runs the packages' maintainer scripts
#             with the host's tools under DPKG_ROOT; iptables-wrapper
#             --install run the same way; then the binary and the
#             kube-proxy link
#
# The Debian layer is kept under target/image/ARCH and made again when the
# recipe below or the wrapper changes, or with IMAGE_REFRESH=1 (to take
# Debian's newest packages). IMAGE_PROFILE=dev builds the binaries with
# cargo's dev profile instead of release.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
case $target in /*) ;; *) target=$repo/$target ;; esac
out=$target/image
archive=$out/kube-ipvs-proxy.oci.tar

log() { printf '%s image: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() {
    log "$*"
    exit 1
}

arches=("$@")
((${#arches[@]})) || arches=(amd64 arm64)
for arch in "${arches[@]}"; do
    case $arch in
    amd64 | arm64) ;;
    *) die "unknown architecture $arch (amd64 or arm64)" ;;
    esac
done

"$here/deps.sh" "${arches[@]}"

cd "$repo"
version=$(cargo metadata --no-deps --format-version 1 |
    jq -r '.packages[] | select(.name == "kube-ipvs-proxy") | .version')
source_url=$(sed -n 's/^repository = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
revision=$(git rev-parse HEAD)
created=$(git log -1 --format=%cI)
# Layers dated by the commit, not by the clock (given to mmdebstrap and
# buildah only: in cargo's environment it would rebuild the crates whose
# build scripts watch it).
epoch=$(git log -1 --format=%ct)
name=localhost/kube-ipvs-proxy:v$version

# shellcheck source=arch.sh
source "$here/arch.sh"
elf_machine() {
    case $1 in
    amd64) echo 62 ;; # EM_X86_64
    arm64) echo 183 ;; # EM_AARCH64
    esac
}
host_arch=$(dpkg --print-architecture)
# IMAGE_PROFILE=dev puts the debug build in (CI: the release profile is a
# build of the whole dependency tree that nothing else there shares).
profile=${IMAGE_PROFILE:-release}

# The binary as the builder stage makes it, stripped by the strip of its
# architecture.
binary() {
    local arch=$1 dir strip=strip
    log "building the proxy for $arch"
    dir=$("$here/cargo.sh" "$arch" "$profile" --locked --bin kube-ipvs-proxy)
    [[ $arch == "$host_arch" ]] || strip=$(gnu_triple "$arch")-strip
    mkdir -p "$out/$arch"
    "$strip" -o "$out/$arch/kube-ipvs-proxy" "$dir/kube-ipvs-proxy"
    echo "$out/$arch/kube-ipvs-proxy"
}

# What debian:12-slim leaves out (documentation, man pages, locales), as
# its dpkg configuration does; chrootless dpkg reads the host's
# configuration, so the hook deletes them after the fact instead.
slim_hook='rm -rf "$1"/usr/share/man/* "$1"/usr/share/locale/* "$1"/usr/share/info/* "$1"/var/cache/debconf/*-old "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin; find "$1"/usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete; find "$1"/usr/share/doc -mindepth 1 -type d -empty -delete'
# The Dockerfile's `iptables-wrapper --install`, on the host: it only runs
# update-alternatives, which takes DPKG_ROOT as its root.
wrapper_hook='DPKG_ROOT="$1" sh "$1"/usr/sbin/iptables-wrapper --install'

debian_layer() {
    local arch=$1 dir=$out/$1
    local key
    key=$(printf '%s\n' "$arch" "$slim_hook" "$wrapper_hook" "$(sha256sum <"$repo/deploy/iptables-wrapper")" | sha256sum | cut -c1-16)
    if [[ -f $dir/debian.tar && $(cat "$dir/debian.key" 2>/dev/null) == "$key" && -z ${IMAGE_REFRESH:-} ]]; then
        echo "$dir/debian.tar"
        return
    fi
    log "making Debian 12 minbase + iptables for $arch (mmdebstrap, chrootless)"
    mkdir -p "$dir"
    rm -f "$dir/debian.tar" "$dir/debian.key"
    SOURCE_DATE_EPOCH=$epoch mmdebstrap --quiet --variant=minbase --mode=chrootless --arch="$arch" \
        --format=tar --include=iptables \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        --customize-hook="copy-in $repo/deploy/iptables-wrapper /usr/sbin" \
        --customize-hook='chmod 755 "$1"/usr/sbin/iptables-wrapper' \
        --customize-hook="$wrapper_hook" \
        --customize-hook="$slim_hook" \
        bookworm "$dir/debian.tar.part" \
        "deb http://deb.debian.org/debian bookworm main" \
        "deb http://deb.debian.org/debian bookworm-updates main" \
        "deb http://deb.debian.org/debian-security bookworm-security main" >&2
    mv "$dir/debian.tar.part" "$dir/debian.tar"
    echo "$key" >"$dir/debian.key"
    echo "$dir/debian.tar"
}

# One image per architecture in buildah's storage: the Debian layer, then
# the proxy's (the binary and kubeadm's kube-proxy path), as the
# Dockerfile's last steps make them.
image() {
    local arch=$1 bin=$2 base=$3 ctr stage
    stage=$out/$arch/proxy-layer
    rm -rf "$stage"
    install -D -m 755 "$bin" "$stage/usr/local/bin/kube-ipvs-proxy"
    ln -s kube-ipvs-proxy "$stage/usr/local/bin/kube-proxy"
    ctr=$(buildah from --arch "$arch" --os linux scratch)
    buildah add --quiet "$ctr" "$base" / >/dev/null
    buildah commit --quiet --rm --timestamp "$epoch" "$ctr" "localhost/kube-ipvs-proxy-debian:$arch" >/dev/null
    ctr=$(buildah from --pull=never --arch "$arch" "localhost/kube-ipvs-proxy-debian:$arch")
    buildah copy --quiet "$ctr" "$stage" / >/dev/null
    buildah config --arch "$arch" --os linux \
        --entrypoint '["/usr/local/bin/kube-ipvs-proxy"]' --cmd '' \
        --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --label "org.opencontainers.image.source=$source_url" \
        --label "org.opencontainers.image.revision=$revision" \
        --label "org.opencontainers.image.version=v$version" \
        --label "org.opencontainers.image.created=$created" \
        --label "org.opencontainers.image.licenses=Apache-2.0" \
        --label "org.opencontainers.image.title=kube-ipvs-proxy" \
        --created-by "deploy/image/build.sh" "$ctr"
    buildah commit --quiet --rm --timestamp "$epoch" "$ctr" "$name-$arch" >/dev/null
    rm -rf "$stage"
}

for arch in "${arches[@]}"; do
    bin=$(binary "$arch")
    base=$(debian_layer "$arch")
    log "assembling the $arch image"
    image "$arch" "$bin" "$base"
done

log "writing $archive"
buildah manifest rm "$name" >/dev/null 2>&1 || true
buildah manifest create "$name" >/dev/null
for arch in "${arches[@]}"; do
    buildah manifest add --arch "$arch" --os linux "$name" "containers-storage:$name-$arch" >/dev/null
done
rm -f "$archive"
buildah manifest push --quiet --all --format oci "$name" "oci-archive:$archive:$name" >/dev/null
buildah manifest rm "$name" >/dev/null

machines=()
for arch in "${arches[@]}"; do machines+=("$arch=$(elf_machine "$arch")"); done
python3 "$here/check.py" "$archive" "v$version" "$revision" "${machines[@]}"
