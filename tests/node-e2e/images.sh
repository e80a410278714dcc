#!/usr/bin/env bash
# Builds the images the real-node e2e runs, without a registry, and writes
# them as archives that `ctr images import` reads:
#
#   kube-ipvs-proxy   deploy/Dockerfile built by buildah: its runtime stage
#                     as written, the builder stage replaced by the same
#                     release build made here (`--build-context builder=`),
#                     stripped as the builder stage strips it; with
#                     NODE_E2E_PROFILE=dev the debug build instead (CI:
#                     the release profile is the one build of the whole
#                     dependency tree nothing else in CI shares)
#   kube-proxy        upstream's binary from build-k8s.sh, on the same base
#                     (tests/node-e2e/kube-proxy.Dockerfile)
#   pause, testpod    testkit's static programs, alone in their images
#
# The base, debian:bookworm-slim, cannot be pulled either: it is made once
# from Debian's packages with mmdebstrap (minbase, without documentation,
# as the official slim image; base-image.sh) and kept in buildah's storage. The runtime
# stage's `apt-get install` runs for real (host network: Debian's mirror is
# reachable).
#
#   tests/node-e2e/images.sh OUT_DIR
#
# Writes OUT_DIR/{kube-ipvs-proxy,kube-proxy,pause,testpod}.tar (Docker
# archives named as images.env says) and OUT_DIR/images.env, and prints
# each image's size. Environment: E2E_K8S_DIR (as build-k8s.sh),
# NODE_E2E_PROFILE (release, the default, or dev).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
case $target in /*) ;; *) target=$repo/$target ;; esac
# shellcheck source=../kubernetes/release.sh
source "$repo/tests/kubernetes/release.sh"
out=${1:?usage: $0 OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# The names the manifests use, as containerd normalises them.
proxy_image=docker.io/library/kube-ipvs-proxy:e2e
upstream_image=docker.io/library/kube-proxy:e2e
pause_image=docker.io/kube-ipvs-proxy-e2e/pause:1
testpod_image=docker.io/kube-ipvs-proxy-e2e/testpod:1

log() { printf '%s images: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() {
    log "$*"
    exit 1
}

"$repo/tests/vm/deps.sh" buildah mmdebstrap


# archive IMAGE FILE: a Docker archive, which `ctr images import` names by
# its RepoTags.
archive() {
    rm -f "$2"
    buildah push --quiet "$1" "docker-archive:$2:$1" >/dev/null
}

size_of() {
    buildah images --format '{{.Size}}' "$1"
}

# static_image NAME BINARY IMAGE: the binary alone, as /NAME.
static_image() {
    local ctr
    ctr=$(buildah from scratch)
    install -s -m 755 "$2" "$out/$1.bin"
    buildah copy --quiet "$ctr" "$out/$1.bin" "/$1" >/dev/null
    buildah config --entrypoint "[\"/$1\"]" "$ctr"
    buildah commit --quiet --rm "$ctr" "$3" >/dev/null
    rm -f "$out/$1.bin"
}

base=$("$here/base-image.sh" "$out")

profile=${NODE_E2E_PROFILE:-release}
log "building the proxy ($profile) and testkit's static programs"
cd "$repo"
proxy_binary=$(cargo build --profile "$profile" --locked --bin kube-ipvs-proxy \
    --message-format=json-render-diagnostics |
    jq -r 'select(.reason == "compiler-artifact" and .target.name == "kube-ipvs-proxy")
           | .executable // empty')
[[ -x $proxy_binary ]] || die "building the proxy ($profile) gave no executable"
builder=$out/builder
rm -rf "$builder"
install -D -s "$proxy_binary" "$builder/out/kube-ipvs-proxy"
# Static: the images have no libc. An explicit --target keeps these flags
# off the workspace's own build (a separate target folder).
host=$(rustc -vV | sed -n 's/^host: //p')
RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --locked -p testkit --bin pause --bin testpod --target "$host"

log "building $proxy_image from deploy/Dockerfile"
buildah build --quiet --pull=never --network host --layers \
    --build-context "builder=$builder" --build-arg "DEBIAN_IMAGE=$base" \
    -f "$repo/deploy/Dockerfile" -t "$proxy_image" "$repo" >/dev/null

log "building $upstream_image from $k8s_bin/kube-proxy"
[[ -x $k8s_bin/kube-proxy ]] || die "no $k8s_bin/kube-proxy: run tests/e2e/build-k8s.sh"
upstream_ctx=$out/kube-proxy-context
rm -rf "$upstream_ctx"
mkdir -p "$upstream_ctx"
cp "$k8s_bin/kube-proxy" "$repo/deploy/iptables-wrapper" "$upstream_ctx/"
buildah build --quiet --pull=never --network host --layers \
    -f "$here/kube-proxy.Dockerfile" -t "$upstream_image" "$upstream_ctx" >/dev/null

static_image pause "$target/$host/debug/pause" "$pause_image"
static_image testpod "$target/$host/debug/testpod" "$testpod_image"

stripped=$(stat -c %s "$builder/out/kube-ipvs-proxy")
archive "$proxy_image" "$out/kube-ipvs-proxy.tar"
archive "$upstream_image" "$out/kube-proxy.tar"
archive "$pause_image" "$out/pause.tar"
archive "$testpod_image" "$out/testpod.tar"
rm -rf "$builder" "$upstream_ctx"

cat >"$out/images.env" <<EOF
E2E_PROXY_IMAGE=$proxy_image
E2E_UPSTREAM_IMAGE=$upstream_image
E2E_PAUSE_IMAGE=$pause_image
E2E_TESTPOD_IMAGE=$testpod_image
EOF
for image in "$proxy_image" "$upstream_image" "$pause_image" "$testpod_image"; do
    log "$image: $(size_of "$image") (uncompressed)"
done
log "the proxy's binary ($profile): $(stat -c %s "$proxy_binary") bytes as built, $stripped stripped in the image"
