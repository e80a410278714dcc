#!/usr/bin/env bash
# A cluster of real worker nodes for Kubernetes' own e2e suite: the
# loopback control plane (tests/e2e/control-plane.sh, as for node-e2e) and
# two real-kernel guests, each a node as tests/node-e2e/node.sh makes one
# (containerd, runc, the CNI bridge, a kubelet), joined by a virtual link.
#
#   tests/k8s-e2e/cluster.sh up             start everything; returns once
#                                           both Nodes are Ready
#   tests/k8s-e2e/cluster.sh proxy ours|upstream
#                                           install that proxy as kubeadm
#                                           installs kube-proxy and wait for
#                                           it on every node (one proxy per
#                                           cluster: a comparison boots a
#                                           fresh cluster for each)
#   tests/k8s-e2e/cluster.sh chart [ARGS]   helm install ours from the chart
#                                           (kubeadm's kube-proxy ConfigMap
#                                           as its configuration), not
#                                           waiting for it; ARGS are helm's
#   tests/k8s-e2e/cluster.sh manifest       prints ours' plain manifest as
#                                           `proxy ours` applies it
#   tests/k8s-e2e/cluster.sh dns            CoreDNS as kubeadm deploys it
#   tests/k8s-e2e/cluster.sh check          what the suite relies on: a Pod
#                                           on each node, Pod to Pod across
#                                           nodes with the client's own
#                                           address, the API server to a
#                                           Pod, kubectl exec in the image
#   tests/k8s-e2e/cluster.sh env            shell exports for the cluster
#   tests/k8s-e2e/cluster.sh down           stop the guests and the control
#                                           plane
#
# Why two guests and not kind-style nodes in one: each node needs a kernel
# of its own for what the suite checks across nodes (IPVS, conntrack and
# iptables state per node, a proxy restarted on one node only), and a
# guest is what node-e2e already proves as a node. The link is QEMU's UDP
# socket network between the two guests only: no host interface, nothing
# reachable beyond them. Each node's address is on that link
# (198.18.128.0/24, outside the Service range, which is 198.18.0.0/17
# here); Pod ranges (198.19.N.0/24, from the controller-manager) are routed
# over it, so Pod traffic crosses nodes with the Pods' own addresses. The
# API server reaches the nodes, Pods and Services through node-a's CONNECT
# agent (tests/node-e2e/connect.sh).
#
# Environment: E2E_K8S_DIR (tests/e2e/build-k8s.sh), K8S_E2E_IMAGES (a
# folder of image archives every node imports besides node-e2e's; default:
# the archives build.sh last built, listed in
# $TARGET/k8s-e2e/K8S_VERSION/images.txt),
# K8S_E2E_INSTALL (how `proxy ours` installs ours: manifest, the default,
# deploy/kube-ipvs-proxy.yaml; or chart, as `chart` does),
# K8S_E2E_PROXY (ours or upstream: the nodes import only that proxy's
# image; default both), NODE_E2E_PROFILE (the proxy image's build, dev
# here), VM_MEM (3072 per node), VM_SMP (1 per node: two guests share a
# 2-core host, and one vCPU keeps out the cross-CPU lockup CI once met).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
case $target in /*) ;; *) target=$repo/$target ;; esac
run=$target/k8s-e2e/cluster
# shellcheck source=../kubernetes/release.sh
source "$repo/tests/kubernetes/release.sh"
node_images=$target/node-e2e/images
built_images=$target/k8s-e2e/$K8S_VERSION/images.txt

nodes=(node-a node-b)
node_ips=(198.18.128.11 198.18.128.12)
link_macs=(52:54:00:00:80:0a 52:54:00:00:80:0b)
# One zone per node, so that the tests of topology-aware routing that need
# two zones run (those that need three still skip).
node_zones=(zone-a zone-b)
# Each guest's end of the link, a UDP port on the host's loopback.
link_ports=(23811 23812)
cluster_dns=198.18.0.10
cluster_cidr=198.19.0.0/16

# The control plane for this cluster, beside node-e2e's defaults.
export E2E_RUN_DIR=$target/k8s-e2e/control-plane
export E2E_KUBELET=1
export E2E_NODE_NAME=${nodes[0]} E2E_NODE_IP=${node_ips[0]}
export E2E_NODE_NAMES="${nodes[*]}"
export E2E_SERVICE_RANGE=198.18.0.0/17

log() { printf '%s k8s-e2e: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() {
    log "$*"
    exit 1
}
kubectl() { "$k8s_bin/kubectl" --kubeconfig "$E2E_RUN_DIR/admin.kubeconfig" "$@"; }

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

nodes_ready() {
    local n
    for n in "${nodes[@]}"; do
        [[ $(kubectl get node "$n" \
            -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]] ||
            return 1
    done
}

guest_alive() { [[ -f $run/$1.pid ]] && kill -0 "$(cat "$run/$1.pid")" 2>/dev/null; }

boot_node() {
    local i=$1 n=${nodes[$1]} peer=$((1 - $1))
    local link="-netdev socket,id=link,udp=127.0.0.1:${link_ports[$peer]},localaddr=127.0.0.1:${link_ports[$i]}"
    link+=" -device virtio-net-pci,netdev=link,mac=${link_macs[$i]}"
    local guest_ports=
    # Only node-a's agent is the API server's way in: it reaches node-b
    # over the link.
    ((i == 0)) && guest_ports=$E2E_VM_GUEST_PORTS
    log "booting $n (${node_ips[$i]}), its console in $run/$n.log"
    # setsid: `down` stops the guest's whole process group.
    # shellcheck disable=SC2154 # set by control-plane.sh env
    VM_HOST_PORTS=$E2E_VM_HOST_PORTS VM_GUEST_PORTS=$guest_ports \
        VM_MEM=${VM_MEM:-3072} VM_SMP=${VM_SMP:-1} VM_TIMEOUT=86400 \
        VM_QEMU_ARGS="$link" \
        VM_PASS_ENV="E2E_K8S_BIN E2E_IMAGES E2E_KUBELET_KUBECONFIG E2E_CA_CERT \
E2E_ADMIN_GUEST_KUBECONFIG E2E_NODE_NAME E2E_NODE_IP E2E_APISERVER_PORT \
E2E_NODE_LINK_MAC E2E_NODE_ZONE E2E_NODE_COUNT E2E_CLUSTER_DNS E2E_EXTRA_IMAGES \
E2E_NODE_IMAGES" \
        E2E_K8S_BIN=$k8s_bin E2E_IMAGES=$node_images \
        E2E_KUBELET_KUBECONFIG=$E2E_RUN_DIR/kubelet-$n.kubeconfig \
        E2E_NODE_NAME=$n E2E_NODE_IP=${node_ips[$i]} \
        E2E_NODE_LINK_MAC=${link_macs[$i]} E2E_NODE_ZONE=${node_zones[$i]} \
        E2E_NODE_COUNT=${#nodes[@]} \
        E2E_CLUSTER_DNS=$cluster_dns E2E_EXTRA_IMAGES=$extra \
        E2E_NODE_IMAGES=$node_image_names \
        setsid "$repo/tests/vm/run" "$repo/tests/node-e2e/node.sh" \
        sleep infinity </dev/null >"$run/$n.log" 2>&1 &
    echo $! >"$run/$n.pid"
}

cmd_up() {
    [[ ! -d $run ]] || die "already up (or not cleaned up): run '$0 down' first"
    "$repo/tests/vm/deps.sh" containerd runc containernetworking-plugins \
        buildah mmdebstrap util-linux socat
    "$repo/tests/e2e/build-k8s.sh"
    NODE_E2E_PROFILE=${NODE_E2E_PROFILE:-dev} \
        "$repo/tests/node-e2e/images.sh" "$node_images"
    # Importing is most of a node's start under TCG: only what will run.
    case ${K8S_E2E_PROXY:-} in
    ours) node_image_names="pause kube-ipvs-proxy" ;;
    upstream) node_image_names="pause kube-proxy" ;;
    '') node_image_names="pause kube-ipvs-proxy kube-proxy" ;;
    *) die "K8S_E2E_PROXY must be ours or upstream, not $K8S_E2E_PROXY" ;;
    esac
    mkdir -p "$run"
    extra=
    if [[ -n ${K8S_E2E_IMAGES:-} ]]; then
        extra=$K8S_E2E_IMAGES
    elif [[ -s $built_images ]]; then
        # The folder may also hold archives of an earlier, larger build.
        extra=$run/images
        mkdir -p "$extra"
        local name file
        while IFS='=' read -r name file; do
            [[ -f $file ]] || die "build.sh listed $name as $file, which is missing"
            ln -s "$file" "$extra/"
        done <"$built_images"
    else
        log "no $built_images: the nodes get node-e2e's images only"
    fi
    "$repo/tests/e2e/control-plane.sh" start
    eval "$("$repo/tests/e2e/control-plane.sh" env)"
    local started=$SECONDS i
    for i in "${!nodes[@]}"; do
        boot_node "$i"
    done
    local deadline=$((SECONDS + 900))
    until nodes_ready 2>/dev/null; do
        for i in "${nodes[@]}"; do
            guest_alive "$i" || {
                tail -n 40 "$run/$i.log" >&2
                die "$i's guest stopped before the cluster was up"
            }
        done
        ((SECONDS < deadline)) || die "timed out waiting for ${nodes[*]} Ready"
        sleep 5
    done
    log "${nodes[*]} Ready after $((SECONDS - started))s"
    kubectl get nodes -o wide >&2
}

cmd_down() {
    local n pid
    for n in "${nodes[@]}"; do
        [[ -f $run/$n.pid ]] || continue
        pid=$(cat "$run/$n.pid")
        kill -- "-$pid" 2>/dev/null || true
    done
    "$repo/tests/e2e/control-plane.sh" stop || true
    rm -rf "$run"
}

# kubeadm's kube-proxy objects (node-e2e's copy of its addon), with the
# cluster's API server and Pod range as kubeadm sets them.
kubeadm_manifest() {
    sed -e "s|UPSTREAM_IMAGE|$E2E_UPSTREAM_IMAGE|" \
        -e "s|API_SERVER|$1|" \
        -e "s|clusterCIDR: \"\"|clusterCIDR: $cluster_cidr|" \
        "$repo/tests/node-e2e/kube-proxy.yaml"
}

# deploy/kube-ipvs-proxy.yaml as this cluster runs it: the nodes' image,
# the API server as the nodes reach it, the Pod range.
cmd_manifest() {
    eval "$("$repo/tests/e2e/control-plane.sh" env)"
    # shellcheck disable=SC1091
    source "$node_images/images.env"
    sed -e "s|image: kube-ipvs-proxy:dev|image: $E2E_PROXY_IMAGE|" \
        -e "s|server: https://control-plane.invalid:6443|server: https://10.0.2.100:$E2E_APISERVER_PORT|" \
        -e "s|clusterCIDR: \"\"|clusterCIDR: $cluster_cidr|" \
        "$repo/deploy/kube-ipvs-proxy.yaml"
}

# Ours from the Helm chart with its defaults, as an operator installs it on
# a kubeadm cluster: the configuration is kubeadm's kube-proxy ConfigMap as
# it is (applied first, without kube-proxy's DaemonSet, where kubeadm's
# addon did not run), the image the nodes imported. ARGS go to helm
# install (`--set migration.nodeLabel=...`). Does not wait for the Pods.
cmd_chart() {
    eval "$("$repo/tests/e2e/control-plane.sh" env)"
    # shellcheck disable=SC1091
    source "$node_images/images.env"
    local helm
    helm=$("$repo/tests/chart/test.sh" --tools-only)
    if ! kubectl -n kube-system get configmap kube-proxy >/dev/null 2>&1; then
        kubeadm_manifest "https://10.0.2.100:$E2E_APISERVER_PORT" |
            kubectl apply --dry-run=client -o json -f - |
            jq '.items |= map(select(.kind != "DaemonSet"))' |
            kubectl apply -f - >&2
    fi
    "$helm" --kubeconfig "$E2E_RUN_DIR/admin.kubeconfig" install kube-ipvs-proxy \
        "$repo/deploy/chart/kube-ipvs-proxy" --namespace kube-system \
        --set "image.repository=${E2E_PROXY_IMAGE%:*}" \
        --set "image.tag=${E2E_PROXY_IMAGE##*:}" "$@" >&2
}

# Our DaemonSet (deploy/, or the chart with K8S_E2E_INSTALL=chart) or
# kubeadm's kube-proxy, with the cluster's Pod range as kubeadm sets it
# from its podSubnet.
cmd_proxy() {
    local which=${1:?usage: $0 proxy ours|upstream}
    eval "$("$repo/tests/e2e/control-plane.sh" env)"
    # shellcheck disable=SC1091
    source "$node_images/images.env"
    local server="https://10.0.2.100:$E2E_APISERVER_PORT" manifest= ds other
    local install=${K8S_E2E_INSTALL:-manifest}
    [[ $install == manifest || $install == chart ]] ||
        die "K8S_E2E_INSTALL must be manifest or chart, not $install"
    case $which/$install in
    ours/manifest)
        manifest=$(cmd_manifest)
        ds=kube-ipvs-proxy other=kube-proxy
        ;;
    ours/chart) ds=kube-ipvs-proxy other=kube-proxy ;;
    upstream/manifest)
        manifest=$(kubeadm_manifest "$server")
        ds=kube-proxy other=kube-ipvs-proxy
        ;;
    upstream/chart) die "K8S_E2E_INSTALL=chart: only ours has a chart" ;;
    *) die "usage: $0 proxy ours|upstream" ;;
    esac
    if kubectl -n kube-system get daemonset "$other" >/dev/null 2>&1; then
        die "$other already runs here: one proxy per cluster"
    fi
    if [[ -n $manifest ]]; then
        grep -q "clusterCIDR: $cluster_cidr" <<<"$manifest" ||
            die "the $which manifest lost its clusterCIDR field"
        kubectl apply -f - <<<"$manifest" >&2
    else
        cmd_chart
        [[ $(kubectl -n kube-system get configmap kube-proxy \
            -o jsonpath='{.data.config\.conf}') == *"clusterCIDR: $cluster_cidr"* ]] ||
            die "kubeadm's kube-proxy ConfigMap lost its clusterCIDR field"
    fi
    kubectl -n kube-system rollout status "daemonset/$ds" --timeout=600s >&2
    log "$which's DaemonSet ($install) ready on every node"
}

cmd_dns() {
    # The image kubeadm of the release deploys (build.sh made it).
    sed "s|registry.k8s.io/coredns/coredns:[^[:space:]]*|registry.k8s.io/coredns/coredns:$coredns_version|" \
        "$here/coredns.yaml" | kubectl apply -f - >&2
    kubectl -n kube-system rollout status deployment/coredns --timeout=600s >&2
    log "CoreDNS ready"
}

# One agnhost netexec Pod bound to NODE in namespace NS.
netexec_pod() {
    kubectl -n "$1" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: check-$2
spec:
  nodeName: $2
  containers:
  - name: netexec
    image: registry.k8s.io/e2e-test-images/agnhost:$agnhost_version
    args: [netexec, --http-port=8080]
    readinessProbe:
      httpGet: {path: /healthz, port: 8080}
EOF
}

cmd_check() {
    eval "$("$repo/tests/e2e/control-plane.sh" env)"
    local ns=k8s-e2e-check a=${nodes[0]} b=${nodes[1]} ip_a ip_b seen
    kubectl delete namespace "$ns" --ignore-not-found >/dev/null
    kubectl create namespace "$ns" >/dev/null
    wait_for "default ServiceAccount in $ns" 60 \
        kubectl -n "$ns" get serviceaccount default
    netexec_pod "$ns" "$a"
    netexec_pod "$ns" "$b"
    kubectl -n "$ns" wait --for=condition=Ready "pod/check-$a" "pod/check-$b" \
        --timeout=300s >&2
    ip_a=$(kubectl -n "$ns" get pod "check-$a" -o jsonpath='{.status.podIP}')
    ip_b=$(kubectl -n "$ns" get pod "check-$b" -o jsonpath='{.status.podIP}')
    # /clientip answers with the address the server saw.
    seen=$(kubectl -n "$ns" exec "check-$a" -- \
        curl -sS --max-time 10 "http://$ip_b:8080/clientip")
    [[ ${seen%:*} == "$ip_a" ]] ||
        die "check-$a ($ip_a) to check-$b ($ip_b): the server saw '$seen'"
    log "check: Pod to Pod across nodes, $ip_a to $ip_b, seen as $seen"
    seen=$(kubectl get --raw "/api/v1/namespaces/$ns/pods/check-$b:8080/proxy/hostname")
    [[ $seen == "check-$b" ]] ||
        die "the API server to check-$b through pods/proxy: '$seen'"
    log "check: the API server reaches a Pod on $b (pods/proxy)"
    seen=$(kubectl -n "$ns" exec "check-$b" -- cat /etc/os-release)
    grep -q '^ID=debian' <<<"$seen" && kubectl -n "$ns" exec "check-$b" -- test -x /agnhost ||
        die "kubectl exec check-$b does not run in the image: $seen"
    log "check: kubectl exec runs in the image on $b"
    kubectl delete namespace "$ns" --wait=false >/dev/null
    log "check: passed"
}

cmd_env() {
    "$repo/tests/e2e/control-plane.sh" env
    printf 'export K8S_E2E_NODES=%q\n' "${nodes[*]}"
}

case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
proxy) cmd_proxy "${2:-}" ;;
chart) cmd_chart "${@:2}" ;;
manifest) cmd_manifest ;;
dns) cmd_dns ;;
check) cmd_check ;;
env) cmd_env ;;
*) die "usage: $0 up|proxy ours|upstream|chart [HELM_ARGS]|manifest|dns|check|env|down" ;;
esac
