#!/usr/bin/env bash
# Builds the upstream binaries the e2e tests run against (kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, kube-proxy, kubelet,
# kubeadm and etcd) of one Kubernetes release (K8S_VERSION, tests/kubernetes/release.sh)
# from its Go module in tests/kubernetes/K8S_VERSION, into
# $E2E_K8S_DIR/K8S_VERSION/bin ($E2E_K8S_DIR defaults to $TARGET/k8s,
# $TARGET being CARGO_TARGET_DIR, else target/ in the repository).
#
# The first build compiles most of Kubernetes and takes many minutes; the
# binaries are kept and the build is skipped while the module's files (and
# this script) are unchanged, so later runs cost nothing. The module and build caches live
# under $E2E_K8S_DIR as well (the module cache shared, the build cache per
# release), so CI needs to cache that one folder (a release's bin/ alone is
# enough to skip its build).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=../kubernetes/release.sh
source "$repo/tests/kubernetes/release.sh"
module=$k8s_module
bin=$k8s_bin

tools=(kube-apiserver kube-controller-manager kube-scheduler kubectl kube-proxy
    kubelet kubeadm etcd)
inputs=("$module/go.mod" "$module/go.sum" "$here/build-k8s.sh")

log() { printf '%s build-k8s: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# By content, not by time: a fresh clone's files are all newer than a build
# shared through E2E_K8S_DIR.
inputs_hash() { cat "${inputs[@]}" | sha256sum | cut -d' ' -f1; }

up_to_date() {
    local tool
    for tool in "${tools[@]}"; do
        [[ -x "$bin/$tool" ]] || return 1
    done
    [[ "$(cat "$bin/.inputs" 2>/dev/null)" == "$(inputs_hash)" ]]
}

if [[ "${1:-}" != "--force" ]] && up_to_date; then
    log "up to date in $bin"
    exit 0
fi

command -v go >/dev/null || { log "go is not installed"; exit 1; }

export GOMODCACHE="$k8s_root/gomod"
export GOCACHE="$k8s_dir/gocache"
# The one-release layout before K8S_VERSION kept v1.34.10's binaries and
# build cache (5 GB) at the top: nothing reads them now.
rm -rf "$k8s_root/bin" "$k8s_root/gocache"
# A newer toolchain than the installed one must not be fetched behind our
# back, and the committed go.sum is the only source of checksums.
export GOTOOLCHAIN=local
export GOFLAGS="-trimpath -mod=readonly"
export CGO_ENABLED=0
mkdir -p "$bin" "$GOMODCACHE" "$GOCACHE"

cd "$module"
version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
# Without these the binaries report v0.0.0 and kubectl warns about skew.
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$version"
    ldflags+=" -X $pkg.gitMajor=$(cut -d. -f1 <<<"${version#v}")"
    ldflags+=" -X $pkg.gitMinor=$(cut -d. -f2 <<<"${version#v}")"
    ldflags+=" -X $pkg.gitTreeState=clean"
    ldflags+=" -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

start=$SECONDS
log "downloading modules into $GOMODCACHE"
go mod download
log "modules ready after $((SECONDS - start))s; building $version"
# One go invocation so the packages the binaries share compile once.
go build -ldflags="$ldflags" -o "$bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl \
    k8s.io/kubernetes/cmd/kube-proxy \
    k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kubeadm \
    go.etcd.io/etcd/server/v3
# The etcd module's main package is its root: go names it after "server".
mv "$bin/server" "$bin/etcd"
inputs_hash >"$bin/.inputs"
log "built ${tools[*]} into $bin in $((SECONDS - start))s"
