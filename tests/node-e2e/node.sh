#!/usr/bin/env bash
# In the real-kernel guest: makes it a Kubernetes node, then runs a command
# on it (tests/node-e2e/run.sh boots the guest with this).
#
#   tests/node-e2e/node.sh COMMAND [ARG...]
#
# The node: containerd and runc (Debian's), the CNI plugins (Debian's
# bridge, host-local, portmap for hostPorts, and loopback; containerd
# writes the bridge network's configuration from the podCIDR the kubelet
# hands it), the images of
# E2E_IMAGES imported, and the kubelet from build-k8s.sh registering Node
# E2E_NODE_NAME (address E2E_NODE_IP, on a dummy link) with its client
# certificate. Returns once the Node is Ready, as the controller-manager's
# node lifecycle sees it, then runs COMMAND and exits with its status;
# on failure it prints the ends of the kubelet's and containerd's logs.
#
# The guest's root is this machine's, shared read-only: what the node
# writes goes to tmpfs mounts over /var/lib and /var/log (the kubelet's
# root, pod logs and /var/log/containers; containerd's root; the CNI
# plugins' state) and /run.
#
# The API server reaches into the node (the kubelet's logs and exec, Pods
# and Services through its proxy subresources) through an HTTP CONNECT
# agent on port 10260 (connect.sh), forwarded from the host.
#
# Environment (run.sh passes it): E2E_K8S_BIN, E2E_IMAGES (the folder of
# images.sh), E2E_KUBELET_KUBECONFIG, E2E_CA_CERT,
# E2E_ADMIN_GUEST_KUBECONFIG, E2E_NODE_NAME, E2E_NODE_IP. For one node of
# several (tests/k8s-e2e/): E2E_NODE_LINK_MAC, the MAC of the NIC that
# joins the nodes, which then carries the node's address (else a dummy
# link does); E2E_NODE_COUNT, the number of Nodes whose Pod ranges to route
# to over that link; E2E_NODE_ZONE, the node's topology.kubernetes.io/zone
# label, given at registration as a cloud provider would (none if unset);
# E2E_CLUSTER_DNS, the cluster DNS Service's address
# for the kubelet to give Pods; E2E_NODE_IMAGES, which of images.sh's
# archives to import (default all); E2E_EXTRA_IMAGES, a folder whose every
# .tar is imported too.
set -euo pipefail

: "${E2E_K8S_BIN:?}" "${E2E_IMAGES:?}" "${E2E_KUBELET_KUBECONFIG:?}"
: "${E2E_CA_CERT:?}" "${E2E_ADMIN_GUEST_KUBECONFIG:?}"
: "${E2E_NODE_NAME:?}" "${E2E_NODE_IP:?}"
(($#)) || { echo "usage: $0 COMMAND [ARG...]" >&2; exit 2; }

started=$SECONDS
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { printf '%s node: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() {
    log "$*"
    exit 1
}
kubectl() { "$E2E_K8S_BIN/kubectl" --kubeconfig "$E2E_ADMIN_GUEST_KUBECONFIG" "$@"; }
# The images' names, for the tests too.
set -a
# shellcheck disable=SC1091
source "$E2E_IMAGES/images.env"
set +a

node_logs() {
    local f
    for f in /var/log/containerd.log /var/log/kubelet.log; do
        [[ -f $f ]] || continue
        log "--- the end of $f"
        tail -n 40 "$f" >&2
    done
}

# Polls COMMAND until it succeeds or SECONDS_ pass.
wait_for() {
    local what=$1 seconds_=$2
    shift 2
    local deadline=$((SECONDS + seconds_))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || {
            node_logs
            die "timed out after ${seconds_}s waiting for $what"
        }
        sleep 1
    done
}

# A node's host name is its Node's name, as on any node whose kubelet is not
# told otherwise: hostNetwork Pods answer with it, and tests compare it
# with the Node's name.
hostname "$E2E_NODE_NAME"

# --- writable places and the kernel's parts ---------------------------------
mount -t tmpfs -o size=3g,mode=755 tmpfs /var/lib
mount -t tmpfs -o mode=755 tmpfs /var/log
mount -t cgroup2 cgroup2 /sys/fs/cgroup
# The kubelet needs these controllers for its pod cgroups.
for c in cpu cpuset memory pids io hugetlb; do
    grep -qw "$c" /sys/fs/cgroup/cgroup.controllers &&
        echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control
done
# /lib/modules with the running kernel's modules, as on any node (kubeadm's
# kube-proxy DaemonSet mounts it): the shared root has no such folder, so
# an overlay over /usr/lib adds it, bound to the kernel's modules that the
# guest's init loads from (vm.modroot).
modroot=$(sed -n 's/.*vm\.modroot=\([^ ]*\).*/\1/p' /proc/cmdline)
[[ -d $modroot/lib/modules/$(uname -r) ]] || die "no modules for $(uname -r) under '$modroot'"
mkdir -p /run/usr-lib/upper /run/usr-lib/work
mount -t overlay overlay \
    -o lowerdir=/usr/lib,upperdir=/run/usr-lib/upper,workdir=/run/usr-lib/work /usr/lib
mkdir -p /usr/lib/modules
mount --bind "$modroot/lib/modules" /usr/lib/modules
# Bridged pod traffic goes through iptables (the proxy's masquerading),
# as on any kube-proxy node.
sysctl -qw net.bridge.bridge-nf-call-iptables=1 net.ipv4.ip_forward=1
# The node's address, the one its Node reports: on the link to the other
# nodes, or alone on a dummy link.
if [[ -n ${E2E_NODE_LINK_MAC:-} ]]; then
    link=
    for dev in /sys/class/net/*; do
        [[ $(cat "$dev/address") == "$E2E_NODE_LINK_MAC" ]] && link=${dev##*/}
    done
    [[ -n $link ]] || die "no NIC with MAC $E2E_NODE_LINK_MAC"
else
    link=node0
    ip link add node0 type dummy
fi
ip addr add "$E2E_NODE_IP/24" dev "$link"
ip link set "$link" up
# Pods' traffic leaves the node under the node's address only when it
# leaves the cluster's Pod network (the API server, on the host): between
# Pods, on this node or another, their own addresses are kept, as the
# e2e's client-IP tests require. (The bridge plugin's own ipMasq would
# masquerade whatever leaves the node's Pod range, other nodes' Pods too.)
cluster_cidr=198.19.0.0/16
iptables -t nat -A POSTROUTING -s "$cluster_cidr" ! -d "$cluster_cidr" \
    -m comment --comment "e2e node: Pods to outside the cluster" -j MASQUERADE

# --- containerd ---------------------------------------------------------------
conf=/run/node
mkdir -p "$conf" /var/lib/cni/net.d
cat >"$conf/cni.template" <<'EOF'
{
  "cniVersion": "1.0.0",
  "name": "e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "{{.PodCIDR}}"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {
      "type": "portmap",
      "capabilities": {"portMappings": true}
    }
  ]
}
EOF
cat >"$conf/containerd.toml" <<EOF
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$E2E_PAUSE_IMAGE"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/var/lib/cni/net.d"
    conf_template = "$conf/cni.template"
EOF
log "starting containerd"
containerd --config "$conf/containerd.toml" >/var/log/containerd.log 2>&1 &
ctr() { command ctr --address /run/containerd/containerd.sock -n k8s.io "$@"; }
wait_for "containerd" 60 ctr version
node_images=${E2E_NODE_IMAGES:-pause testpod kube-ipvs-proxy kube-proxy}
for image in $node_images; do
    ctr images import "$E2E_IMAGES/$image.tar" >/dev/null
done
if [[ -n ${E2E_EXTRA_IMAGES:-} ]]; then
    for image in "$E2E_EXTRA_IMAGES"/*.tar; do
        ctr images import "$image" >/dev/null || die "cannot import $image"
    done
fi
# Two tags of our image, for the rolling update from one to the other.
if [[ " $node_images " == *" kube-ipvs-proxy "* ]]; then
    ctr images tag "$E2E_PROXY_IMAGE" "$E2E_PROXY_IMAGE-a" >/dev/null
    ctr images tag "$E2E_PROXY_IMAGE" "$E2E_PROXY_IMAGE-b" >/dev/null
fi
log "images imported after $((SECONDS - started))s: $(ctr images list -q | grep -vc '^sha256:') names"

# --- the kubelet ----------------------------------------------------------------
mkdir -p /var/lib/kubelet
cp "$E2E_KUBELET_KUBECONFIG" /var/lib/kubelet/kubeconfig
cat >/var/lib/kubelet/config.yaml <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
# The API server's client certificate (logs, exec) is signed by the test
# CA; nothing else talks to the kubelet.
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $E2E_CA_CERT}
authorization: {mode: AlwaysAllow}
readOnlyPort: 0
# Images cannot be pulled again: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%
  imagefs.available: 1%
failSwapOn: false
EOF
if [[ -n ${E2E_CLUSTER_DNS:-} ]]; then
    printf 'clusterDNS: [%s]\nclusterDomain: cluster.local\n' "$E2E_CLUSTER_DNS" \
        >>/var/lib/kubelet/config.yaml
fi
log "starting the kubelet"
"$E2E_K8S_BIN/kubelet" --config /var/lib/kubelet/config.yaml \
    --kubeconfig /var/lib/kubelet/kubeconfig \
    --hostname-override "$E2E_NODE_NAME" --node-ip "$E2E_NODE_IP" \
    ${E2E_NODE_ZONE:+--node-labels "topology.kubernetes.io/zone=$E2E_NODE_ZONE"} \
    -v 1 >/var/log/kubelet.log 2>&1 &

node_ready() {
    [[ $(kubectl get node "$E2E_NODE_NAME" \
        -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]
}
# The API server's way in (see the top). socat's default backlog is 5:
# the suite's proxy test dials 16 targets at once.
socat TCP-LISTEN:10260,reuseaddr,fork,backlog=128 EXEC:"$here/connect.sh" \
    >/var/log/connect-agent.log 2>&1 &

# Every other node's Pod range through that node's address, as a CNI's
# route controller would (kind's kindnet does this): the Nodes register
# about together, so their ranges are all known within the wait.
other_ranges() {
    kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name} {.spec.podCIDR} {.status.addresses[?(@.type=="InternalIP")].address}{"\n"}{end}' |
        awk -v self="$E2E_NODE_NAME" '$1 != self && $2 != "" && $3 != "" {print $2, $3}'
}
all_ranges_known() {
    (($(other_ranges | wc -l) == ${E2E_NODE_COUNT:-1} - 1))
}
if ((${E2E_NODE_COUNT:-1} > 1)); then
    wait_for "the Pod ranges of ${E2E_NODE_COUNT} Nodes" 300 all_ranges_known
    while read -r range via; do
        ip route replace "$range" via "$via" dev "$link"
        log "route to $range via $via"
    done < <(other_ranges)
fi

# The node's own wait ends here, with its routes in place.
wait_for "Node $E2E_NODE_NAME Ready" 300 node_ready
log "Node $E2E_NODE_NAME Ready after $((SECONDS - started))s, podCIDR $(kubectl get node "$E2E_NODE_NAME" -o jsonpath='{.spec.podCIDR}')"

status=0
"$@" || status=$?
((status == 0)) || node_logs
exit "$status"
