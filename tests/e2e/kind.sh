#!/usr/bin/env bash
# `make kind-e2e`: the scenarios of `make e2e` (tests/cluster_e2e/) on a
# kind cluster, with the proxy deployed the way users deploy it.
#
#   1. a kind cluster without kube-proxy (networking.kubeProxyMode: none),
#      one control-plane node and one worker;
#   2. the image built from deploy/Dockerfile and `kind load`ed;
#   3. deploy/ applied with the image and the API server filled in
#      (server-side dry run first), the DaemonSet rolled out, the nodes
#      Ready;
#   4. `cargo test --features kind-tests --test cluster_e2e kind_e2e` on
#      the worker: real agnhost Pods, `docker exec` for ipvsadm and traffic;
#   5. the cluster deleted, whether the tests passed or not.
#
# Needs docker, kind, kubectl and cargo, and a host kernel with the IPVS
# modules (the nodes share it). Environment:
#   KIND_E2E_CLUSTER     cluster name (kube-ipvs-proxy-e2e)
#   KIND_E2E_NODE_IMAGE  kind node image (kind's default)
#   KIND_E2E_IMAGE       the proxy's image tag (kube-ipvs-proxy:kind-e2e)
#   KIND_E2E_AGNHOST     the Pods' image
#                        (registry.k8s.io/e2e-test-images/agnhost:2.53)
#   KIND_E2E_KEEP        non-empty: keep the cluster after a failure
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cluster=${KIND_E2E_CLUSTER:-kube-ipvs-proxy-e2e}
image=${KIND_E2E_IMAGE:-kube-ipvs-proxy:kind-e2e}
agnhost=${KIND_E2E_AGNHOST:-registry.k8s.io/e2e-test-images/agnhost:2.53}
node_image=${KIND_E2E_NODE_IMAGE:-}
worker=$cluster-worker
placeholder_image='kube-ipvs-proxy:dev'
placeholder_server='https://control-plane.invalid:6443'

log() { printf '%s kind-e2e: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() {
    log "$*"
    exit 1
}

for tool in docker kind kubectl cargo; do
    command -v "$tool" >/dev/null || die "needs $tool on PATH"
done

work=$(mktemp -d)
teardown() {
    local rc=$?
    if [[ $rc -ne 0 && -n ${KIND_E2E_KEEP:-} ]]; then
        log "failed; keeping cluster $cluster (kubeconfig $work/kubeconfig)"
        exit "$rc"
    fi
    log "deleting cluster $cluster"
    kind delete cluster --name "$cluster" >/dev/null 2>&1 || true
    rm -rf "$work"
    exit "$rc"
}
trap teardown EXIT

# A leftover of an aborted run would make `create` fail.
kind delete cluster --name "$cluster" >/dev/null 2>&1 || true
cat >"$work/kind.yaml" <<'YAML'
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  kubeProxyMode: none
nodes:
  - role: control-plane
  - role: worker
YAML
log "creating cluster $cluster"
# No --wait: without kube-proxy the nodes may not get Ready before ours runs
# (a CNI that reaches the API server through the kubernetes Service).
kind create cluster --name "$cluster" --config "$work/kind.yaml" \
    --kubeconfig "$work/kubeconfig" ${node_image:+--image "$node_image"}
export KUBECONFIG=$work/kubeconfig

log "building $image"
docker build -f "$repo/deploy/Dockerfile" -t "$image" "$repo"
kind load docker-image --name "$cluster" "$image"

# The nodes pull the Pods' image themselves (`kind load` of a multi-platform
# image fails with some Docker image stores); pulled now so that no
# scenario's timing includes it.
for node in $(kind get nodes --name "$cluster"); do
    docker exec "$node" crictl pull "$agnhost" >/dev/null
done

# The proxy reaches the API server as the nodes do, by the control-plane
# container's name on kind's network: what kind's internal kubeconfig says.
server=$(kind get kubeconfig --internal --name "$cluster" |
    awk '$1 == "server:" { print $2; exit }')
[[ -n $server ]] || die "no API server address in kind's internal kubeconfig"
sed -e "s|image: $placeholder_image|image: $image|" \
    -e "s|server: $placeholder_server|server: $server|" \
    "$repo/deploy/kube-ipvs-proxy.yaml" >"$work/deploy.yaml"
grep -q "image: $image" "$work/deploy.yaml" ||
    die "deploy/kube-ipvs-proxy.yaml has no image: $placeholder_image to replace"
grep -q "server: $server" "$work/deploy.yaml" ||
    die "deploy/kube-ipvs-proxy.yaml has no server: $placeholder_server to replace"

log "deploy/: server-side dry run"
kubectl apply --dry-run=server -f "$work/deploy.yaml"
log "deploy/: applying"
kubectl apply -f "$work/deploy.yaml"
kubectl -n kube-system rollout status daemonset kube-ipvs-proxy --timeout=300s
kubectl wait --for=condition=Ready nodes --all --timeout=300s

# The checks read the kernel with ipvsadm and ipset, which kind's node
# image may lack.
docker exec "$worker" sh -c '
    command -v ipvsadm >/dev/null && command -v ipset >/dev/null && exit 0
    apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ipvsadm ipset >/dev/null'

log "scenarios on $worker"
cd "$repo"
KIND_E2E_NODE=$worker KIND_E2E_AGNHOST=$agnhost \
    cargo test --features kind-tests --test cluster_e2e -- kind_e2e \
    --test-threads=1 --nocapture
log "passed"
