#!/usr/bin/env bash
# kubeadm's kube-proxy addon against a real API server, as
# docs/install.md describes it (step 7 of make chart-test, on its API
# server; it changes objects there and nothing on this machine):
#
# 1. `kubeadm init phase addon kube-proxy` makes what `kubeadm init`
#    leaves: kube-proxy's ServiceAccount, RBAC, ConfigMap and DaemonSet.
#    The ConfigMap is what the chart mounts by default, and ours takes its
#    config.conf as it is;
# 2. install.md's switch: kube-proxy's DaemonSet kept off every node (the
#    nodeSelector patch), and the other way, its image replaced by ours;
# 3. the addon phase of an upgrade (`kubeadm upgrade apply phase addon
#    kube-proxy`, then `kubeadm upgrade node phase addon kube-proxy`, each
#    on a control-plane node) puts kubeadm's DaemonSet back: the patch and
#    the image are gone;
# 4. with `proxy: {disabled: true}` in the cluster's ClusterConfiguration
#    (kubeadm-config, uploaded as install.md says), both phases skip the
#    addon and the DaemonSet keeps the patch.
#
# The upgrade reads the control-plane node it runs on from the cluster: a
# Node named after this host and its kube-apiserver Pod (a mirror Pod, as
# the kubelet reports a static one), made here; no kubelet runs. kubeadm
# runs in mount namespaces of its own (root, util-linux's unshare and
# overlayfs), so that it finds a static Pod manifest where this machine
# has none.
#
#   tests/chart/kubeadm.sh KUBEADM KUBECTL KUBECONFIG PROXY_BINARY WORK_DIR
#
# KUBECONFIG is an administrator's, of a cluster with no kube-proxy yet.
set -euo pipefail

kubeadm_bin=${1:?usage: $0 KUBEADM KUBECTL KUBECONFIG PROXY_BINARY WORK_DIR}
kubectl_bin=${2:?}
kubeconfig=${3:?}
proxy_bin=${4:?}
work=${5:?}

log() { printf '%s kubeadm: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() {
    log "$*"
    exit 1
}
kubectl() { "$kubectl_bin" --kubeconfig "$kubeconfig" "$@"; }
# kubeadm as on a control-plane node: `upgrade node` tells one by its
# static Pod manifest, /etc/kubernetes/manifests/kube-apiserver.yaml, which
# this machine has not. Each run gets it in a mount namespace of its own,
# over an overlay of /etc that ends with the run. Its output is kept, and
# shown when it fails.
kubeadm() {
    local out
    out=$(mktemp "$work/kubeadm-XXXX.log")
    rm -rf "$work/etc-upper" "$work/etc-work"
    mkdir -p "$work/etc-upper/kubernetes/manifests" "$work/etc-work"
    printf '%s\n' 'apiVersion: v1' 'kind: Pod' \
        'metadata: {name: kube-apiserver, namespace: kube-system}' \
        'spec:' '  containers:' \
        "  - {name: kube-apiserver, image: \"registry.k8s.io/kube-apiserver:$version\"}" \
        >"$work/etc-upper/kubernetes/manifests/kube-apiserver.yaml"
    # shellcheck disable=SC2016 # expanded by the inner shell
    if ! unshare --mount -- bash -c '
        mount --make-rprivate / &&
        mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc &&
        shift 2 && exec "$@"' _ "$work/etc-upper" "$work/etc-work" \
        "$kubeadm_bin" "$@" --kubeconfig "$kubeconfig" >"$out" 2>&1; then
        cat "$out" >&2
        die "kubeadm $* failed"
    fi
    cat "$out"
}
((EUID == 0)) || die "needs root, for kubeadm's mount namespaces"
mkdir -p "$work"

server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
endpoint=${server#https://}
version=$("$kubeadm_bin" version -o short)
[[ $version == v* ]] || die "kubeadm version said '$version'"
# The node name kubeadm's upgrade takes without a kubelet.conf.
node=$(hostname | tr '[:upper:]' '[:lower:]')
[[ $node =~ ^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$ ]] ||
    die "this host's name, '$node', cannot name a Node"

cluster_config() {
    cat <<EOF
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: $version
controlPlaneEndpoint: $endpoint
networking:
  podSubnet: 198.19.0.0/16
  serviceSubnet: 198.18.0.0/16
$1
EOF
}
cat >"$work/init.yaml" <<EOF
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
# kubeadm refuses a loopback address to advertise (it would look for
# another on the default route's interface): this one is only recorded,
# as the address of a control-plane node that does not exist.
localAPIEndpoint:
  advertiseAddress: 198.18.255.1
  bindPort: ${endpoint##*:}
nodeRegistration:
  name: $node
---
$(cluster_config "")
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: ipvs
EOF

# 1: what kubeadm init leaves.
kubeadm init phase upload-config all --config "$work/init.yaml" >/dev/null
kubeadm init phase addon kube-proxy --config "$work/init.yaml" >/dev/null
kubectl -n kube-system get daemonset kube-proxy >/dev/null ||
    die "kubeadm's addon made no kube-proxy DaemonSet"
kubeadm_image=$(kubectl -n kube-system get daemonset kube-proxy \
    -o jsonpath='{.spec.template.spec.containers[0].image}')
kubectl -n kube-system get configmap kube-proxy -o jsonpath='{.data.config\.conf}' \
    >"$work/config.conf"
kubectl -n kube-system get configmap kube-proxy -o jsonpath='{.data.kubeconfig\.conf}' \
    >"$work/kubeconfig.conf"
grep -q '^mode: ipvs$' "$work/config.conf" || die "kubeadm's config.conf lost mode: ipvs"
grep -q 'kubeconfig: /var/lib/kube-proxy/kubeconfig.conf' "$work/config.conf" ||
    die "kubeadm's config.conf reads its kubeconfig elsewhere than the chart mounts it"
grep -q "server: $server" "$work/kubeconfig.conf" ||
    die "kubeadm's kubeconfig.conf does not name $server"
"$proxy_bin" --config "$work/config.conf" --write-config-to "$work/effective.yaml" \
    >"$work/proxy.log" 2>&1 || {
    cat "$work/proxy.log" >&2
    die "ours refuses kubeadm's config.conf"
}
grep -q '^mode: ipvs$' "$work/effective.yaml" || die "ours does not read kubeadm's config.conf as IPVS mode"
log "kubeadm $version's addon: kube-proxy's DaemonSet ($kubeadm_image) and ConfigMap, whose config.conf ours takes as it is"

# The control-plane node the upgrade runs on, as the cluster shows it
# (and kube-system's default ServiceAccount, which a controller-manager
# would have made, for its Pod).
kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: default, namespace: kube-system}
---
apiVersion: v1
kind: Node
metadata:
  name: $node
  labels: {node-role.kubernetes.io/control-plane: ""}
---
apiVersion: v1
kind: Pod
metadata:
  name: kube-apiserver-$node
  namespace: kube-system
  labels: {component: kube-apiserver, tier: control-plane}
  annotations:
    kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint: 198.18.255.1:${endpoint##*:}
spec:
  nodeName: $node
  containers:
  - name: kube-apiserver
    image: registry.k8s.io/kube-apiserver:$version
EOF
cat >"$work/upgrade.yaml" <<EOF
apiVersion: kubeadm.k8s.io/v1beta4
kind: UpgradeConfiguration
apply:
  kubernetesVersion: $version
EOF

# 2: install.md's switch, both ways.
switch_away() {
    kubectl -n kube-system patch daemonset kube-proxy --type=merge \
        -p '{"spec":{"template":{"spec":{"nodeSelector":{"kube-ipvs-proxy/run-kube-proxy":"true"}}}}}' >/dev/null
    kubectl -n kube-system set image daemonset/kube-proxy \
        kube-proxy=registry.invalid/kube-ipvs-proxy:test >/dev/null
}
# "patched" when the DaemonSet still has both changes, "kubeadm's" when
# kubeadm wrote it back, anything else as it is.
daemonset_state() {
    local selector image
    selector=$(kubectl -n kube-system get daemonset kube-proxy \
        -o jsonpath='{.spec.template.spec.nodeSelector.kube-ipvs-proxy/run-kube-proxy}')
    image=$(kubectl -n kube-system get daemonset kube-proxy \
        -o jsonpath='{.spec.template.spec.containers[0].image}')
    if [[ $selector == true && $image == registry.invalid/kube-ipvs-proxy:test ]]; then
        echo patched
    elif [[ -z $selector && $image == "$kubeadm_image" ]]; then
        echo "kubeadm's"
    else
        echo "nodeSelector '$selector', image $image"
    fi
}

# 3: each upgrade's addon phase undoes the switch.
phases=("upgrade apply phase addon kube-proxy --config $work/upgrade.yaml"
    "upgrade node phase addon kube-proxy")
for phase in "${phases[@]}"; do
    switch_away
    [[ $(daemonset_state) == patched ]] || die "the switch did not take: $(daemonset_state)"
    # shellcheck disable=SC2086 # the phase's words
    kubeadm $phase >/dev/null
    state=$(daemonset_state)
    [[ $state == "kubeadm's" ]] ||
        die "kubeadm $phase left kube-proxy's DaemonSet as $state, not as kubeadm writes it"
    log "kubeadm $phase: kube-proxy's DaemonSet back as kubeadm writes it (the nodeSelector patch and ours' image gone)"
done

# 4: proxy.disabled in the cluster's ClusterConfiguration keeps both away.
cluster_config "proxy:
  disabled: true" >"$work/disabled.yaml"
kubeadm init phase upload-config kubeadm --config "$work/disabled.yaml" >/dev/null
kubectl -n kube-system get configmap kubeadm-config -o jsonpath='{.data.ClusterConfiguration}' |
    grep -q 'disabled: true' || die "kubeadm-config lacks proxy.disabled after the upload"
switch_away
for phase in "${phases[@]}"; do
    # shellcheck disable=SC2086
    said=$(kubeadm $phase)
    grep -q 'Skipping the addon/kube-proxy phase. The addon is disabled' <<<"$said" ||
        die "kubeadm $phase did not skip the disabled addon: $said"
    state=$(daemonset_state)
    [[ $state == patched ]] || die "kubeadm $phase with proxy.disabled changed kube-proxy's DaemonSet: $state"
    log "kubeadm $phase with proxy.disabled: skipped, the DaemonSet keeps the switch"
done
echo "RESULT kubeadm $version addon undoes the switch on upgrade: yes; proxy.disabled keeps it: yes"
