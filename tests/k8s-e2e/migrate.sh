#!/usr/bin/env bash
# `make k8s-e2e-migration`: install.md's node-by-node migration from
# kube-proxy (upstream's, IPVS mode, as kubeadm deploys it) to ours and
# back, on the two-node cluster of cluster.sh, under steady traffic:
#
#   1. kube-proxy on both nodes; a Deployment with one Pod on each node
#      behind a NodePort Service; on each node a client Pod that asks the
#      Service's cluster IP and the node port on both nodes' addresses,
#      over and over, each answer or failure logged;
#   2. kube-proxy's DaemonSet kept off nodes labelled
#      kube-ipvs-proxy.io/enabled=true (a NotIn node affinity), ours
#      applied with the matching In affinity, so it runs nowhere yet (the
#      image is on both nodes already, as a pre-pull leaves it);
#   3. node-a labelled, waited for (kube-proxy gone, ours Ready), then
#      node-b; then back: node-b unlabelled, then node-a;
#   4. the clients' logs: every request of every client answered, none
#      failed, each target asked throughout.
#
# Environment: cluster.sh's (E2E_K8S_DIR, VM_MEM, VM_SMP, ...; with
# K8S_E2E_INSTALL=chart ours is the Helm chart's, installed with
# migration.nodeLabel, kubeadm's kube-proxy ConfigMap its configuration),
# K8S_E2E_KEEP=1 leaves the cluster up.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=../kubernetes/release.sh
source "$repo/tests/kubernetes/release.sh"
label=kube-ipvs-proxy.io/enabled
ns=k8s-e2e-migration
node_port=30777
nodes=(node-a node-b)
node_ips=(198.18.128.11 198.18.128.12)

log() { printf '%s migration: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() {
    log "$*"
    exit 1
}

"$here/build.sh" "${CARGO_TARGET_DIR:-$repo/target}/k8s-e2e/$K8S_VERSION"
"$here/cluster.sh" down >/dev/null 2>&1 || true
"$here/cluster.sh" up
if [[ -z ${K8S_E2E_KEEP:-} ]]; then
    trap '"$here/cluster.sh" down' EXIT
fi
eval "$("$here/cluster.sh" env)"
# kube-proxy as kubeadm deploys it, whichever way ours is installed.
K8S_E2E_INSTALL=manifest "$here/cluster.sh" proxy upstream

# Polls COMMAND until it succeeds or SECONDS_ pass.
wait_for() {
    local what=$1 seconds_=$2
    shift 2
    local deadline=$((SECONDS + seconds_))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "timed out after ${seconds_}s waiting for $what"
        sleep 2
    done
}

# The Ready Pod of DaemonSet label $1 on node $2, if any.
ready_on() {
    kubectl -n kube-system get pods -l "$1" --field-selector "spec.nodeName=$2" \
        -o jsonpath='{range .items[*]}{.metadata.deletionTimestamp}{"|"}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' |
        grep -qx '|True'
}
none_on() {
    [[ -z $(kubectl -n kube-system get pods -l "$1" --field-selector "spec.nodeName=$2" -o name) ]]
}
upstream_sel=k8s-app=kube-proxy,app.kubernetes.io/name!=kube-ipvs-proxy
ours_sel=app.kubernetes.io/name=kube-ipvs-proxy

kubectl create namespace "$ns" >/dev/null
wait_for "default ServiceAccount in $ns" 60 kubectl -n "$ns" get serviceaccount default
agnhost=registry.k8s.io/e2e-test-images/agnhost:$agnhost_version
kubectl -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: echo}
spec:
  replicas: 2
  selector: {matchLabels: {app: echo}}
  template:
    metadata: {labels: {app: echo}}
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {matchLabels: {app: echo}}
            topologyKey: kubernetes.io/hostname
      containers:
      - name: netexec
        image: $agnhost
        args: [netexec, --http-port=8080]
        readinessProbe:
          httpGet: {path: /healthz, port: 8080}
---
apiVersion: v1
kind: Service
metadata: {name: echo}
spec:
  type: NodePort
  selector: {app: echo}
  ports:
  - {port: 80, targetPort: 8080, nodePort: $node_port}
EOF
kubectl -n "$ns" rollout status deployment/echo --timeout=300s >&2
vip=$(kubectl -n "$ns" get service echo -o jsonpath='{.spec.clusterIP}')
targets="http://$vip/hostname http://${node_ips[0]}:$node_port/hostname http://${node_ips[1]}:$node_port/hostname"
for n in "${nodes[@]}"; do
    kubectl -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: client-$n}
spec:
  nodeName: $n
  terminationGracePeriodSeconds: 1
  containers:
  - name: client
    image: $agnhost
    command:
    - sh
    - -c
    - |
      while true; do
        for u in $targets; do
          if r=\$(curl -sS --max-time 3 "\$u" 2>&1); then echo "ok \$u \$r"; else echo "FAILED \$u \$(date -u +%T) \$r"; fi
        done
        sleep 0.2
      done
EOF
done
kubectl -n "$ns" wait --for=condition=Ready pod/client-node-a pod/client-node-b --timeout=300s >&2

# Each client's count of answers to each target, or of failures, from
# the line after its baseline on.
declare -A baseline
tally() {
    local n u
    for n in "${nodes[@]}"; do
        kubectl -n "$ns" logs "client-$n" | tail -n "+$((baseline[$n] + 1))" \
            >"$log_dir/client-$n.log"
        for u in $targets; do
            printf '%s %s ok %s failed %s\n' "$n" "$u" \
                "$(grep -c "^ok $u " "$log_dir/client-$n.log" || true)" \
                "$(grep -c "^FAILED $u " "$log_dir/client-$n.log" || true)"
        done
    done
}
log_dir=${CARGO_TARGET_DIR:-$repo/target}/k8s-e2e/$K8S_VERSION/migration
rm -rf "$log_dir" && mkdir -p "$log_dir"
steady() {
    log "$1: traffic for 15 s"
    sleep 15
}
# The count starts once every target has answered each client: a client
# may start before kube-proxy has programmed the new Service.
answered_all() {
    local lines u
    lines=$(kubectl -n "$ns" logs "client-$1")
    for u in $targets; do
        grep -q "^ok $u " <<<"$lines" || return 1
    done
}
for n in "${nodes[@]}"; do
    wait_for "every target to answer client-$n" 120 answered_all "$n"
    baseline[$n]=$(kubectl -n "$ns" logs "client-$n" | wc -l)
done
steady "kube-proxy on both nodes"

start=$SECONDS
affinity() {
    printf '{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"%s","operator":"%s","values":["true"]}]}]}}}' \
        "$label" "$1"
}
kubectl -n kube-system patch daemonset kube-proxy --type=merge \
    -p "{\"spec\":{\"template\":{\"spec\":{\"affinity\":$(affinity NotIn)}}}}" >&2
kubectl -n kube-system rollout status daemonset/kube-proxy --timeout=600s >&2
if [[ ${K8S_E2E_INSTALL:-manifest} == chart ]]; then
    # The chart's own switch for this: the same In affinity.
    "$here/cluster.sh" chart --set "migration.nodeLabel=$label"
else
    "$here/cluster.sh" manifest |
        kubectl apply --dry-run=client -o json -f - |
        jq --argjson a "$(affinity In)" \
            '(.items[] | select(.kind == "DaemonSet") | .spec.template.spec.affinity) = $a' |
        kubectl apply -f - >&2
fi
[[ $(kubectl -n kube-system get daemonset kube-ipvs-proxy -o jsonpath='{.status.desiredNumberScheduled}') == 0 ]] ||
    die "ours is scheduled before any node is labelled"
steady "ours applied, on no node yet"

for n in "${nodes[@]}"; do
    step=$SECONDS
    kubectl label node "$n" "$label=true" >&2
    wait_for "kube-proxy to leave $n" 300 none_on "$upstream_sel" "$n"
    wait_for "ours Ready on $n" 300 ready_on "$ours_sel" "$n"
    log "$n moved to ours in $((SECONDS - step))s"
    steady "ours on $n"
done
for ((i = ${#nodes[@]} - 1; i >= 0; i--)); do
    n=${nodes[$i]} step=$SECONDS
    kubectl label node "$n" "$label-" >&2
    wait_for "ours to leave $n" 300 none_on "$ours_sel" "$n"
    wait_for "kube-proxy Ready on $n" 300 ready_on "$upstream_sel" "$n"
    log "$n back on kube-proxy in $((SECONDS - step))s"
    steady "kube-proxy on $n again"
done
log "migrated node by node and back in $((SECONDS - start))s"

tally | tee "$log_dir/tally.txt" >&2
failed=$(awk '{f += $6} END {print f + 0}' "$log_dir/tally.txt")
fewest=$(awk 'NR == 1 || $4 < m {m = $4} END {print m + 0}' "$log_dir/tally.txt")
echo "RESULT k8s-e2e-migration kubernetes $K8S_VERSION"
echo "RESULT k8s-e2e-migration requests_failed $failed"
echo "RESULT k8s-e2e-migration fewest_answers_per_target $fewest"
((failed == 0)) || {
    grep -h '^FAILED' "$log_dir"/client-*.log | head -n 20 >&2
    die "$failed requests failed (the clients' logs: $log_dir)"
}
# The clients ran throughout: a round at least every 10 s (one takes
# about a second under TCG), in the container they started in.
((fewest * 10 >= SECONDS - start)) || die "a target was asked only $fewest times"
restarts=$(kubectl -n "$ns" get pods client-node-a client-node-b \
    -o jsonpath='{.items[*].status.containerStatuses[0].restartCount}')
[[ $restarts == "0 0" ]] || die "the clients restarted: $restarts"
log "passed: no request failed"
