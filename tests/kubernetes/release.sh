# Sourced by every script that starts Kubernetes: which release it runs, and
# where that release's builds and results live.
#
#   K8S_VERSION   vX.Y.Z, one of K8S_RELEASES below (default the first)
#
# After sourcing:
#   K8S_VERSION   the release, checked
#   k8s_root      $E2E_K8S_DIR, else $TARGET/k8s: one folder for every
#                 release, with the Go module cache they share (gomod/)
#   k8s_dir       $k8s_root/$K8S_VERSION: this release's binaries (bin/) and
#                 Go build cache (gocache/), so two releases never mix
#   k8s_bin       $k8s_dir/bin
#   k8s_module    tests/kubernetes/$K8S_VERSION: its committed go.mod/go.sum
#                 for the control plane, the kubelet, kube-proxy and etcd
#   k8s_minor     1.37 for v1.37.2
#
# Adding a release: tests/kubernetes/new-release.sh vX.Y.Z writes its
# control-plane module; the suite's module (tests/k8s-e2e/suite/vX.Y.Z) and
# the pins of release.env follow (docs/kubernetes-releases.md).

# The newest first: it is the default.
K8S_RELEASES=(v1.37.2 v1.36.3 v1.35.4)

k8s_release_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

k8s_release_known() {
    local r
    for r in "${K8S_RELEASES[@]}"; do
        [[ $r == "$1" ]] && return 0
    done
    return 1
}

K8S_VERSION=${K8S_VERSION:-${K8S_RELEASES[0]}}
if ! k8s_release_known "$K8S_VERSION"; then
    printf 'K8S_VERSION=%s is not a release this project runs; it runs: %s\n' \
        "$K8S_VERSION" "${K8S_RELEASES[*]}" >&2
    exit 64
fi
export K8S_VERSION

k8s_target=${CARGO_TARGET_DIR:-$(cd "$k8s_release_here/../.." && pwd)/target}
case $k8s_target in /*) ;; *) k8s_target=$(cd "$k8s_release_here/../.." && pwd)/$k8s_target ;; esac
k8s_root=${E2E_K8S_DIR:-$k8s_target/k8s}
k8s_dir=$k8s_root/$K8S_VERSION
k8s_bin=$k8s_dir/bin
k8s_module=$k8s_release_here/$K8S_VERSION
k8s_minor=${K8S_VERSION#v}
k8s_minor=${k8s_minor%.*}

# What kubeadm of the release pins (cmd/kubeadm/app/constants), read by
# new-release.sh into the module's release.env.
# shellcheck source=/dev/null
source "$k8s_module/release.env"
