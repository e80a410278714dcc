#!/usr/bin/env bash
# The API/node split against N proxies that each watch the API server, at
# a real kube-apiserver (what is measured: benches/split_vs_direct.rs).
# A control plane of its own (its own run folder and ports, so that it
# can run beside another), the cluster created from the host, then N
# nodes fed each way, no guest: both ways stop short of the kernel.
#
#   BENCH_SPLIT_SERVICES=10000 BENCH_SPLIT_NODES=100 tests/e2e/bench-split-vs-direct.sh
#
# Also BENCH_SPLIT_CHANGES (50) and E2E_K8S_DIR (as build-k8s.sh). The
# table is printed and kept in target/bench/split-vs-direct/results.txt.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cd "$repo"
target=${CARGO_TARGET_DIR:-$repo/target}
out=$target/bench/split-vs-direct
export E2E_K8S_DIR=${E2E_K8S_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kube-ipvs-proxy/k8s}
export E2E_RUN_DIR=$out/control-plane
export E2E_APISERVER_PORT=${E2E_APISERVER_PORT:-6543}
export E2E_CONTROL_PORT=${E2E_CONTROL_PORT:-6540}
export E2E_ETCD_PORT=${E2E_ETCD_PORT:-23890}

log() { printf '%s bench-split-vs-direct: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

"$here/build-k8s.sh"
exe=$(cargo bench --no-run --features e2e-tests --bench split_vs_direct \
    --message-format=json-render-diagnostics |
    jq -r 'select(.reason == "compiler-artifact"
                  and .target.name == "split_vs_direct") | .executable // empty')
[[ -x $exe ]] || { log "building the bench gave no executable"; exit 1; }
# Private copies: a build in the shared target folder during the run
# would swap a binary under it.
rm -rf "$out/bin" && mkdir -p "$out/bin"
cp "$exe" "$out/bin/split_vs_direct"
cp "$(dirname "$(dirname "$exe")")/kube-ipvs-proxy" "$out/bin/kube-ipvs-proxy"

trap '"$here/control-plane.sh" stop >/dev/null 2>&1 || true' EXIT
"$here/control-plane.sh" stop >/dev/null 2>&1 || true
"$here/control-plane.sh" start 2>"$out/control-plane.log" ||
    { cat "$out/control-plane.log" >&2; exit 1; }
eval "$("$here/control-plane.sh" env)"
BENCH_APISERVER_PID=$(cat "$E2E_RUN_DIR/kube-apiserver.pid")
export BENCH_APISERVER_PID BENCH_PROXY_BIN=$out/bin/kube-ipvs-proxy
log "the control plane is up (kube-apiserver $BENCH_APISERVER_PID); running the bench"
"$out/bin/split_vs_direct" | tee "$out/results.txt"
