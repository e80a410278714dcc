#!/usr/bin/env bash
# The proxy in the real-kernel guest against the loopback control plane
# (control-plane.sh): a Service with one ready Pod on the guest's node, the
# proxy started with the ServiceAccount's kubeconfig through guestfwd, and
# the virtual server it must program; then the API server stopped (the
# kernel state stays) and started again (the proxy follows a readiness
# change made after). Runs on the host; boots the guest.
#
#   tests/e2e/guest-smoke.sh        (control plane already started)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
eval "$("$here/control-plane.sh" env)"
ns=e2e-guest
pod_ip=198.19.0.3

log() { printf '%s guest-smoke: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

if [[ ${1:-} != --in-guest ]]; then
    # Force: no kubelet would confirm the Pods' deletion.
    kubectl -n "$ns" delete pods --all --grace-period=0 --force >/dev/null 2>&1 || true
    kubectl delete namespace "$ns" --ignore-not-found --wait=true >/dev/null
    kubectl create namespace "$ns" >/dev/null
    until kubectl -n "$ns" get serviceaccount default >/dev/null 2>&1; do
        sleep 0.5
    done
    kubectl -n "$ns" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, labels: {app: web}}
spec:
  nodeName: $E2E_NODE_NAME
  containers: [{name: web, image: e2e.invalid/none}]
YAML
    kubectl -n "$ns" patch pod web-0 --subresource=status --type=merge \
        -p "{\"status\":{\"phase\":\"Running\",\"podIP\":\"$pod_ip\",\"podIPs\":[{\"ip\":\"$pod_ip\"}],\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}]}}" >/dev/null
    cluster_ip=$(kubectl -n "$ns" get service web -o jsonpath='{.spec.clusterIP}')
    log "Service $ns/web is $cluster_ip; booting the guest"
    cd "$repo"
    VM_HOST_PORTS=$E2E_VM_HOST_PORTS VM_TIMEOUT=300 \
        VM_PASS_ENV="CARGO_TARGET_DIR E2E_KUBECTL E2E_VS E2E_RS E2E_CONTROL_PORT" \
        E2E_KUBECTL=$(command -v kubectl) E2E_VS="$cluster_ip:80" E2E_RS="$pod_ip:8080" \
        tests/vm/run tests/e2e/guest-smoke.sh --in-guest
    exit
fi

# In the guest.
fail() {
    ipvsadm -Ln || true
    tail -30 /tmp/proxy.log || true
    log "FAILED: $*"
    exit 1
}
# Through guestfwd to control-plane.sh's control port.
control() {
    local answer
    # Not socat: it half-closes after its input, and guestfwd's socat then
    # gives up on the answer.
    exec 3<>"/dev/tcp/10.0.2.100/$E2E_CONTROL_PORT"
    echo "$1" >&3
    answer=$(cat <&3)
    exec 3<&-
    [[ $answer == ok* ]] || fail "$1: $answer"
}
# The weight of the real server, empty when there is none.
weight() {
    ipvsadm -Ln -t "$E2E_VS" 2>/dev/null |
        awk -v rs="$E2E_RS" '$1 == "->" && $2 == rs { print $4 }'
}
# Waits up to 60 seconds for the real server's weight to be $1.
wait_weight() {
    for _ in $(seq 120); do
        [[ $(weight) == "$1" ]] && return 0
        sleep 0.5
    done
    fail "the weight of $E2E_RS behind $E2E_VS is '$(weight)', not '$1'"
}

kubectl=("$E2E_KUBECTL" --kubeconfig "$E2E_PROXY_KUBECONFIG")
"${kubectl[@]}" get services -A
"${kubectl[@]}" auth whoami
"$target/debug/kube-ipvs-proxy" --kubeconfig "$E2E_PROXY_KUBECONFIG" \
    --hostname-override "$E2E_NODE_NAME" >/tmp/proxy.log 2>&1 &
proxy=$!
trap 'kill $proxy 2>/dev/null || true' EXIT
wait_weight 1
ipvsadm -Ln
log "the proxy programmed the Service from the real API server"

control apiserver-stop
sleep 10
kill -0 "$proxy" 2>/dev/null || fail "the proxy exited without its API server"
[[ $(weight) == 1 ]] || fail "the real server changed while the API server was away"
control apiserver-start
log "the kernel state stayed while the API server was away"

# A change after the return reaches the kernel: the Pod is no longer ready.
# The transition time is what the EndpointSlice controller reports as the
# change's trigger time, from which the proxy measures network programming.
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
"$E2E_KUBECTL" --kubeconfig "$E2E_ADMIN_GUEST_KUBECONFIG" -n e2e-guest \
    patch pod web-0 --subresource=status --type=merge \
    -p "{\"status\":{\"conditions\":[{\"type\":\"Ready\",\"status\":\"False\",\"lastTransitionTime\":\"$now\"}]}}" \
    >/dev/null
changed=$SECONDS
wait_weight ""
log "the proxy caught up after the API server returned: the real server left $((SECONDS - changed))s after the write"
curl -fsS http://127.0.0.1:10249/metrics |
    grep -E '^kubeproxy_network_programming_duration_seconds_(sum|count)' || true
log "passed"
