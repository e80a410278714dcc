#!/usr/bin/env bash
# Writes the Go modules of a Kubernetes release's test binaries:
#
#   tests/kubernetes/new-release.sh vX.Y.Z
#
#   tests/kubernetes/vX.Y.Z/       the control plane, kubelet, kube-proxy,
#                                  kubeadm and etcd: go.mod (k8s.io/kubernetes at
#                                  the release, its staging modules pinned
#                                  to v0.Y.Z where its own replace block
#                                  points them at ./staging, the etcd server
#                                  its kubeadm deploys, the binaries as
#                                  `tool` lines), go.sum, and release.env:
#                                  what kubeadm of the release pins (etcd,
#                                  CoreDNS, pause) and the agnhost tag its
#                                  e2e suite asks for, read from its sources
#   tests/k8s-e2e/suite/vX.Y.Z/    the e2e suite (../e2e_test.go) at the
#                                  release: go.mod, go.sum, and format_test.go,
#                                  the one import that moved between releases
#   tests/k8s-e2e/coredns/vA.B.C/  the CoreDNS that kubeadm deploys with it
#                                  (../main.go), unless another release
#                                  already pins it
#
# Then add the release to K8S_RELEASES in release.sh. Needs the Go module
# proxy; writes nothing outside those folders and the shared module cache.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version=${1:?usage: $0 vX.Y.Z}
[[ $version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || { echo "not a release: $version" >&2; exit 64; }
staging=v0.${version#v1.}
dir=$here/$version
repo=$(cd "$here/../.." && pwd)
export GOMODCACHE=${E2E_K8S_DIR:-${CARGO_TARGET_DIR:-$repo/target}/k8s}/gomod
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
mkdir -p "$dir" "$GOMODCACHE"

src=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[[ -d $src ]] || { echo "k8s.io/kubernetes@$version: no source" >&2; exit 1; }

constants=$src/cmd/kubeadm/app/constants/constants.go
quoted() { sed -n "s/^[[:space:]]*$1 = \"\\(.*\\)\"/\\1/p" "$constants" | head -1; }
go_line=$(grep -m1 '^go ' "$src/go.mod")
# The etcd that kubeadm deploys with the release (its image tag less the
# "-N" build suffix); it may be newer than the client the API server links,
# which then follows it.
etcd_image=$(quoted DefaultEtcdVersion)
etcd=v${etcd_image%-*}
mapfile -t modules < <(sed -n '/^replace (/,/^)/p' "$src/go.mod" |
    awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }')
((${#modules[@]} > 0)) || { echo "no staging modules in $src/go.mod" >&2; exit 1; }

{
    printf '// The upstream binaries of Kubernetes %s for the e2e tests, the\n' "$version"
    printf '// conformance suite and the benches (tests/kubernetes/new-release.sh).\n'
    printf 'module kube-ipvs-proxy/tests/kubernetes/%s\n\n%s\n\n' "$version" "$go_line"
    printf 'require (\n\tk8s.io/kubernetes %s\n\tgo.etcd.io/etcd/server/v3 %s\n)\n\n' "$version" "$etcd"
    printf '// k8s.io/kubernetes requires its staging modules at v0.0.0 and points\n'
    printf '// them at ./staging; outside its tree they are the published ones.\n'
    printf 'replace (\n'
    for m in "${modules[@]}"; do printf '\t%s => %s %s\n' "$m" "$m" "$staging"; done
    printf ')\n\ntool (\n'
    for t in kube-apiserver kube-controller-manager kube-scheduler kubectl kube-proxy kubelet kubeadm; do
        printf '\tk8s.io/kubernetes/cmd/%s\n' "$t"
    done
    printf '\tgo.etcd.io/etcd/server/v3\n)\n'
} >"$dir/go.mod"
rm -f "$dir/go.sum"
(cd "$dir" && go mod tidy)

agnhost=$(sed -n 's/.*configs\[Agnhost\] = Config{[^"]*"agnhost", "\([^"]*\)"}.*/\1/p' \
    "$src/test/utils/image/manifest.go")
cat >"$dir/release.env" <<ENV
# Written by tests/kubernetes/new-release.sh from k8s.io/kubernetes@$version:
# what its kubeadm pins (cmd/kubeadm/app/constants) and the agnhost tag its
# e2e suite runs (test/utils/image/manifest.go).
etcd_version=$etcd_image
coredns_version=$(quoted CoreDNSVersion)
pause_version=$(quoted PauseVersion)
agnhost_version=$agnhost
ENV
cat "$dir/release.env"

# ---- the e2e suite -----------------------------------------------------------
requirement() { awk -v m="$1" '$1 == m { print $2; exit }' "$src/go.mod"; }
suite=$repo/tests/k8s-e2e/suite/$version
mkdir -p "$suite"
format=k8s.io/kubernetes/test/utils/format
[[ -f $src/test/utils/ktesting/format/format.go ]] && format=k8s.io/kubernetes/test/utils/ktesting/format
cat >"$suite/format_test.go" <<GO
package suite

// Gomega's formatting of API objects, as the release's own suite sets it.
import _ "$format"
GO
{
    printf '// Kubernetes %s'"'"'s e2e suite, network tests only (../e2e_test.go).\n' "$version"
    printf 'module kube-ipvs-proxy/tests/k8s-e2e/suite\n\n%s\n\n' "$go_line"
    printf 'require (\n'
    printf '\tgithub.com/onsi/ginkgo/v2 %s\n' "$(requirement github.com/onsi/ginkgo/v2)"
    printf '\tgithub.com/onsi/gomega %s\n' "$(requirement github.com/onsi/gomega)"
    printf '\tk8s.io/kubernetes %s\n)\n\n' "$version"
    sed -n '/^replace (/,/^)/p' "$dir/go.mod"
    printf '\ntool (\n\tgithub.com/onsi/ginkgo/v2/ginkgo\n'
    printf '\tk8s.io/kubernetes/test/images/agnhost\n'
    printf '\tk8s.io/kubernetes/test/images/regression-issue-74839\n)\n'
} >"$suite/go.mod"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$repo/tests/k8s-e2e/suite/e2e_test.go" "$suite/format_test.go" "$suite/go.mod" "$work/"
(cd "$work" && go mod tidy)
cp "$work/go.mod" "$work/go.sum" "$suite/"

# ---- CoreDNS -------------------------------------------------------------------
coredns_version=$(quoted CoreDNSVersion)
coredns=$repo/tests/k8s-e2e/coredns/$coredns_version
if [[ ! -f $coredns/go.sum ]]; then
    mkdir -p "$coredns"
    rm -rf "${work:?}"/*
    cp "$repo/tests/k8s-e2e/coredns/main.go" "$work/"
    printf '// CoreDNS %s as the cluster DNS (../main.go).\nmodule kube-ipvs-proxy/tests/k8s-e2e/coredns\n\n%s\n\nrequire github.com/coredns/coredns %s\n' \
        "$coredns_version" "$go_line" "$coredns_version" >"$work/go.mod"
    (cd "$work" && go mod tidy)
    cp "$work/go.mod" "$work/go.sum" "$coredns/"
fi
