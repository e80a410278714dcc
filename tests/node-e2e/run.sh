#!/usr/bin/env bash
# `make node-e2e`: the real-kernel guest as a real Kubernetes node, and the
# proxy on it as users run it.
#
#   1. the upstream binaries (build-k8s.sh: kubelet, kube-scheduler, ...);
#   2. the images (images.sh): ours from deploy/Dockerfile, upstream
#      kube-proxy's, pause and testpod;
#   3. the control plane on loopback for a real node (control-plane.sh with
#      E2E_KUBELET=1: scheduler, node lifecycle, podCIDRs, the kubelet's
#      certificate, the API server's way to the kubelet);
#   4. the guest booted as the node (node.sh: containerd, CNI, the kubelet,
#      Ready), then the tests of tests/cluster_e2e/node_e2e.rs in it, one
#      at a time, in the order below;
#   5. the control plane stopped, whatever happened.
#
# Environment: NODE_E2E_TESTS (test names from the list below, in that
# order; default all), NODE_E2E_FEATURES (the test build's features; the
# Makefile passes make e2e's set, so that one build serves both), the
# control plane's (E2E_K8S_DIR, E2E_APISERVER_PORT,
# E2E_CONTROL_PORT, E2E_ETCD_PORT, ...), the image's (NODE_E2E_PROFILE:
# release, the default, or dev; images.sh) and the guest's (VM_MEM,
# default 4096 here; VM_TIMEOUT, default 3600 here).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
case $target in /*) ;; *) target=$repo/$target ;; esac

all_tests=(
    the_daemonset_runs_under_the_kubelet
    a_service_follows_its_pods
    named_target_ports_span_several_slices
    traffic_from_the_node_and_from_a_pod
    list_and_explain_in_the_proxys_pod
    a_proxy_restart_loses_no_request
    a_rolling_update_loses_no_request
    a_migration_from_kube_proxy_and_back_loses_no_request
    the_image_follows_the_nodes_iptables_backend
)
read -r -a tests <<<"${NODE_E2E_TESTS:-${all_tests[*]}}"

log() { printf '%s node-e2e: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
step_start=$SECONDS
step() {
    log "$1 ($((SECONDS - step_start))s since the start)"
}

"$repo/tests/vm/deps.sh" containerd runc containernetworking-plugins \
    buildah mmdebstrap util-linux
export E2E_KUBELET=1
# shellcheck source=../kubernetes/release.sh
source "$repo/tests/kubernetes/release.sh"
"$repo/tests/e2e/build-k8s.sh"

step "building the images"
images=$target/node-e2e/images
"$here/images.sh" "$images"

step "building the tests"
cd "$repo"
binary=$(cargo test --no-run -p kube-ipvs-proxy \
    --features "${NODE_E2E_FEATURES:-kube-ipvs-proxy/node-tests}" \
    --test cluster_e2e --message-format=json-render-diagnostics |
    jq -r 'select(.reason == "compiler-artifact" and .target.name == "cluster_e2e")
           | .executable // empty')
[[ -x $binary ]] || { log "building the tests gave no executable"; exit 1; }

step "starting the control plane"
"$repo/tests/e2e/control-plane.sh" start
trap '"$repo/tests/e2e/control-plane.sh" stop' EXIT
eval "$("$repo/tests/e2e/control-plane.sh" env)"

script=$target/node-e2e/tests.sh
{
    echo 'failed=()'
    printf 'binary=%q\n' "$binary"
    # A test binary whose --exact name matches nothing (a test renamed,
    # a name mistyped in NODE_E2E_TESTS) or whose test is ignored (a
    # feature missing from the build) exits 0 having run nothing: each
    # name must report one test passed.
    cat <<'EOF'
run_test() {
    local rc out=/tmp/node-e2e-test.out
    "$binary" --exact "node_e2e::$1" --nocapture --test-threads=1 \
        --color never 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    if ((rc == 0)) && ! grep -q '^test result: ok\. 1 passed;' "$out"; then
        echo "node-e2e: node_e2e::$1 ran no test: $(grep '^test result:' "$out")"
        rc=1
    fi
    return "$rc"
}
EOF
    for t in "${tests[@]}"; do
        printf 'echo %q\n' "==> node_e2e::$t"
        printf 'start=$SECONDS\n'
        printf 'run_test %q || failed+=(%q)\n' "$t" "$t"
        printf 'echo "<== %s: $((SECONDS - start))s"\n' "$t"
        # A failed start leaves nothing for the others to run on.
        if [[ $t == the_daemonset_runs_under_the_kubelet ]]; then
            echo '((${#failed[@]} == 0)) || exit 1'
        fi
    done
    cat <<'EOF'
if ((${#failed[@]})); then
    echo "node-e2e: FAILED: ${failed[*]}"
    exit 1
fi
echo "node-e2e: all passed"
EOF
} >"$script"

step "booting the node"
# shellcheck disable=SC2154 # set by control-plane.sh env
VM_HOST_PORTS=$E2E_VM_HOST_PORTS VM_GUEST_PORTS=$E2E_VM_GUEST_PORTS \
    VM_MEM=${VM_MEM:-4096} VM_TIMEOUT=${VM_TIMEOUT:-3600} \
    VM_PASS_ENV="E2E_K8S_BIN E2E_IMAGES E2E_KUBELET_KUBECONFIG E2E_CA_CERT \
E2E_ADMIN_GUEST_KUBECONFIG E2E_NODE_NAME E2E_NODE_IP E2E_APISERVER_PORT" \
    E2E_K8S_BIN=$k8s_bin E2E_IMAGES=$images \
    "$repo/tests/vm/run" "$here/node.sh" bash "$script"
step "passed"
