#!/usr/bin/env bash
# A real Kubernetes control plane on this machine's loopback for the e2e
# tests: etcd, kube-apiserver and kube-controller-manager (EndpointSlice
# controller included) built by build-k8s.sh, no kubelet. The guest reaches
# the API server through QEMU's guestfwd (VM_HOST_PORTS=6443 in tests/vm/run)
# at 10.0.2.100:6443.
#
# With E2E_KUBELET=1 it is the control plane of a real node instead (make
# node-e2e, tests/node-e2e/): the guest's kubelet registers the Node
# itself with a client certificate signed by the test CA
# (kubelet.kubeconfig), so no Node is made here and deploy/ is not
# applied (the test applies it as a user would); kube-scheduler runs, the
# controller-manager runs every controller (node lifecycle included) and
# gives each Node a podCIDR from 198.19.0.0/16; the API server reaches into
# the cluster network (kubelets for logs and exec, Pods and Services for
# the proxy subresources) through an HTTP CONNECT egress on a Unix socket
# here, piped to the host's E2E_KUBELET_FORWARD_PORT, which the guest
# forwards to its node's CONNECT agent (tests/node-e2e/connect.sh;
# VM_GUEST_PORTS in tests/vm/run; `env` prints E2E_VM_GUEST_PORTS).
# E2E_NODE_NAMES names every node that will join (default E2E_NODE_NAME
# alone): each gets its client certificate and kubelet-NAME.kubeconfig.
#
#   control-plane.sh start   build if needed, start, wait until ready, add
#                            the guest's Node, apply deploy/ (server-side
#                            dry-run first), write the kubeconfigs
#   control-plane.sh check   the smoke test: a Service and a Pod on the
#                            guest's node, the Pod's status set through the
#                            status subresource, the real controller's
#                            EndpointSlice; the proxy's RBAC
#   control-plane.sh env     shell exports for the running control plane
#   control-plane.sh stop    stop everything and remove the run folder
#   control-plane.sh smoke   start, check, stop (stops on failure too)
#   control-plane.sh apiserver-stop | apiserver-start
#                            stop the API server alone (etcd and the
#                            controller manager stay), start it again
#
# A test in the guest can ask for the last two itself: with
# VM_HOST_PORTS="6443 6440" (E2E_VM_HOST_PORTS from `env`), a line
# "apiserver-stop" or "apiserver-start" sent to 10.0.2.100:6440 runs it and
# is answered "ok" or "error" (then the log) once done: the API server has
# exited, or is ready again. The client must not shut its side down before
# the answer (guestfwd's socat would give up on it).
#
# The run folder ($TARGET/e2e/control-plane, $TARGET being CARGO_TARGET_DIR
# or target/) is outside /tmp on purpose: the guest hides the host's /tmp
# and must read proxy.kubeconfig from there. It holds:
#   admin.kubeconfig        cluster admin, https://127.0.0.1:6443
#   proxy.kubeconfig        the kube-ipvs-proxy ServiceAccount's token,
#                           https://10.0.2.100:6443 (the guest's side)
#   proxy-host.kubeconfig   the same token, https://127.0.0.1:6443
#   admin-guest.kubeconfig  cluster admin, https://10.0.2.100:6443, for
#                           tests in the guest that create and change
#                           objects
#   kubelet.kubeconfig      (E2E_KUBELET=1) the node's client certificate
#                           (system:node:NODE), https://10.0.2.100:6443;
#                           kubelet-NAME.kubeconfig the same for each of
#                           E2E_NODE_NAMES
#   pki/ca.crt              the CA the kubelet trusts for client certificates
#   logs/                   each component's log
#
# Environment: E2E_K8S_DIR (as build-k8s.sh), E2E_RUN_DIR (the run folder,
# $TARGET/e2e/control-plane; another one lets two control planes run side by
# side, on other ports), E2E_APISERVER_PORT (6443),
# E2E_CONTROL_PORT (6440), E2E_ETCD_PORT (23790; the peer port is the next
# one), E2E_NODE_NAME (node-a), E2E_NODE_IP (198.18.100.1),
# E2E_READY_TIMEOUT (180 seconds), E2E_KUBELET (empty; 1 for a real node),
# E2E_KUBELET_FORWARD_PORT (the control port + 2), E2E_SERVICE_RANGE (the
# Service CIDRs, 198.18.0.0/16,2001:db8:42::/112).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
# shellcheck source=../kubernetes/release.sh
source "$repo/tests/kubernetes/release.sh"
bin=$k8s_bin
run=${E2E_RUN_DIR:-$target/e2e/control-plane}

api_port=${E2E_APISERVER_PORT:-6443}
etcd_port=${E2E_ETCD_PORT:-23790}
etcd_peer_port=$((etcd_port + 1))
control_port=${E2E_CONTROL_PORT:-6440}
node_name=${E2E_NODE_NAME:-node-a}
node_ip=${E2E_NODE_IP:-198.18.100.1}
node_names=${E2E_NODE_NAMES:-$node_name}
ready_timeout=${E2E_READY_TIMEOUT:-180}
real_node=${E2E_KUBELET:-}
kubelet_forward_port=${E2E_KUBELET_FORWARD_PORT:-$((control_port + 2))}
# The pod range the controller-manager carves nodes' podCIDRs from (real
# node only): the test pods' range of the fixtures.
cluster_cidr=198.19.0.0/16
# The guest's view of the host's loopback (tests/vm/run, VM_HOST_PORTS).
guest_host_ip=10.0.2.100
service_range=${E2E_SERVICE_RANGE:-198.18.0.0/16,2001:db8:42::/112}
# A fixed token is fine: it exists only for the life of a loopback-only
# test cluster.
admin_token=e2e-admin-token

log() { printf '%s control-plane: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() {
    log "$*"
    exit 1
}

kubectl() { "$bin/kubectl" --kubeconfig "$run/admin.kubeconfig" "$@"; }

# Polls COMMAND until it succeeds or SECONDS_ pass.
wait_for() {
    local what=$1 seconds_=$2
    shift 2
    local deadline=$((SECONDS + seconds_))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "timed out after ${seconds_}s waiting for $what"
        sleep 0.5
    done
}

pid_alive() { [[ -f "$run/$1.pid" ]] && kill -0 "$(cat "$run/$1.pid")" 2>/dev/null; }

# Starts NAME in the background with its output in logs/NAME.log.
spawn() {
    local name=$1
    shift
    # stdin from /dev/null: started from a control request, it would
    # otherwise hold the request's socket open.
    "$@" </dev/null >>"$run/logs/$name.log" 2>&1 &
    echo $! >"$run/$name.pid"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

make_certs() {
    local pki="$run/pki"
    mkdir -p "$pki"
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 \
        -keyout "$pki/ca.key" -out "$pki/ca.crt" -subj "/CN=e2e-ca" 2>/dev/null
    # The first address of the service range is the `kubernetes` Service's.
    openssl req -newkey rsa:2048 -nodes -keyout "$pki/apiserver.key" \
        -out "$pki/apiserver.csr" -subj "/CN=kube-apiserver" 2>/dev/null
    cat >"$pki/apiserver.ext" <<EOF
subjectAltName = IP:127.0.0.1, IP:$guest_host_ip, IP:198.18.0.1, DNS:localhost, DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc
extendedKeyUsage = serverAuth
keyUsage = critical, digitalSignature, keyEncipherment
EOF
    openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" \
        -CAkey "$pki/ca.key" -CAcreateserial -days 30 \
        -extfile "$pki/apiserver.ext" -out "$pki/apiserver.crt" 2>/dev/null
    # The API server's client certificate towards kubelets (logs, exec),
    # and the node's: the Node authorizer knows a kubelet by this subject.
    client_cert "$pki/apiserver-kubelet" kube-apiserver-kubelet-client system:masters
    client_cert "$pki/node" "system:node:$node_name" system:nodes
    local n
    for n in $node_names; do
        client_cert "$pki/node-$n" "system:node:$n" system:nodes
    done
    openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
    openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
    # token,user,uid,"group,..."
    printf '%s,admin,admin,"system:masters"\n' "$admin_token" >"$pki/tokens.csv"
}

# client_cert PATH CN O: PATH.crt and PATH.key signed by the test CA.
client_cert() {
    local pki="$run/pki"
    openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" \
        -subj "/O=$3/CN=$2" 2>/dev/null
    printf 'extendedKeyUsage = clientAuth\nkeyUsage = critical, digitalSignature, keyEncipherment\n' \
        >"$1.ext"
    openssl x509 -req -in "$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
        -CAcreateserial -days 30 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
}

# write_kubelet_kubeconfig FILE NODE CERT: the node's certificate, the
# guest's view of the API server.
write_kubelet_kubeconfig() {
    local node=$2 cert=$3
    cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://$guest_host_ip:$api_port
    certificate-authority-data: $(base64 -w0 <"$run/pki/ca.crt")
users:
- name: $node
  user:
    client-certificate-data: $(base64 -w0 <"$cert.crt")
    client-key-data: $(base64 -w0 <"$cert.key")
contexts:
- name: e2e
  context:
    cluster: e2e
    user: $node
current-context: e2e
EOF
}

# write_kubeconfig FILE SERVER TOKEN
write_kubeconfig() {
    local ca
    ca=$(base64 -w0 <"$run/pki/ca.crt")
    cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: $2
    certificate-authority-data: $ca
users:
- name: e2e
  user:
    token: $3
contexts:
- name: e2e
  context:
    cluster: e2e
    user: e2e
current-context: e2e
EOF
}

register_node() {
    kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $node_name
  labels:
    kubernetes.io/hostname: $node_name
    kubernetes.io/os: linux
EOF
    # No kubelet will report it, so the test reports it: the address the
    # proxy traffic tests use on the guest's node0 link, and Ready.
    local now
    now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    kubectl patch node "$node_name" --subresource=status --type=merge \
        -p "{\"status\":{\"addresses\":[{\"type\":\"InternalIP\",\"address\":\"$node_ip\"},{\"type\":\"Hostname\",\"address\":\"$node_name\"}],\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"reason\":\"E2E\",\"message\":\"set by the e2e control plane\",\"lastHeartbeatTime\":\"$now\",\"lastTransitionTime\":\"$now\"}]}}" \
        >/dev/null
}

apply_deploy() {
    log "deploy/: server-side dry run"
    kubectl apply --dry-run=server -f "$repo/deploy/" >&2
    # The split's variant replaces the DaemonSet: checked, never applied.
    kubectl apply --dry-run=server -f "$repo/deploy/split/" >&2
    log "deploy/: applying"
    kubectl apply -f "$repo/deploy/" >&2
}

start_apiserver() {
    log "starting kube-apiserver on 127.0.0.1:$api_port"
    # kubeadm's preference for reaching kubelets: a Node's address, not its
    # name, which nothing here resolves.
    local pki="$run/pki" egress=()
    if [[ -n $real_node ]]; then
        cat >"$run/egress.yaml" <<EOF
apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: $run/egress.sock
EOF
        egress=(--egress-selector-config-file "$run/egress.yaml")
    fi
    # The advertised address is the guest's view of this server, so the
    # `kubernetes` Service's endpoint is one the guest can reach.
    spawn kube-apiserver "$bin/kube-apiserver" \
        --etcd-servers "http://127.0.0.1:$etcd_port" \
        --bind-address 127.0.0.1 --secure-port "$api_port" \
        --advertise-address "$guest_host_ip" \
        --tls-cert-file "$pki/apiserver.crt" \
        --tls-private-key-file "$pki/apiserver.key" \
        --client-ca-file "$pki/ca.crt" \
        --token-auth-file "$pki/tokens.csv" \
        --service-account-issuer https://kubernetes.default.svc \
        --service-account-key-file "$pki/sa.pub" \
        --service-account-signing-key-file "$pki/sa.key" \
        --service-cluster-ip-range "$service_range" \
        --authorization-mode Node,RBAC \
        --enable-admission-plugins NodeRestriction \
        --kubelet-client-certificate "$pki/apiserver-kubelet.crt" \
        --kubelet-client-key "$pki/apiserver-kubelet.key" \
        --kubelet-preferred-address-types InternalIP,ExternalIP,Hostname \
        "${egress[@]}" \
        --allow-privileged=true \
        --profiling=false
    wait_for "kube-apiserver /readyz" "$ready_timeout" kubectl get --raw /readyz
}

# Stops the process recorded as NAME: TERM, then KILL after GRACE seconds
# (10 by default).
stop_process() {
    local pid grace=${2:-10}
    [[ -f "$run/$1.pid" ]] || return 0
    pid=$(cat "$run/$1.pid")
    if kill "$pid" 2>/dev/null; then
        for _ in $(seq $((grace * 5))); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$run/$1.pid"
}

cmd_apiserver_stop() {
    pid_alive kube-apiserver || die "the API server is not running"
    # It closes its port at once on TERM, then can take more than 10
    # seconds to wind down its controllers; nobody needs those.
    stop_process kube-apiserver 2
    log "kube-apiserver stopped"
}

cmd_apiserver_start() {
    [[ -f "$run/admin.kubeconfig" ]] || die "not started (no $run)"
    pid_alive kube-apiserver && die "the API server is running"
    local start=$SECONDS
    start_apiserver
    log "kube-apiserver ready again after $((SECONDS - start))s"
}

# One request on the control port (from the guest through guestfwd): a line
# naming a command; answers "ok" or "error", then the command's log.
cmd_control_request() {
    local request
    IFS= read -r request || exit 0
    case ${request%$'\r'} in
    apiserver-stop | apiserver-start)
        if "$0" "${request%$'\r'}" 2>"$run/control.out"; then
            echo ok
        else
            echo error
        fi
        cat "$run/control.out"
        ;;
    *) echo "error: unknown request (apiserver-stop, apiserver-start)" ;;
    esac
}

start_failed() {
    local f
    for f in "$run"/logs/*.log; do
        [[ -f $f ]] || continue
        log "--- the end of $(basename "$f")"
        tail -n 15 "$f" >&2
    done
    cmd_stop
}

cmd_start() {
    if pid_alive kube-apiserver; then
        die "already running (run folder $run); stop it first"
    fi
    command -v openssl >/dev/null && command -v curl >/dev/null ||
        "$repo/tests/vm/deps.sh" openssl curl
    "$here/build-k8s.sh"
    local port
    for port in "$api_port" "$etcd_port" "$etcd_peer_port" "$control_port" \
        ${real_node:+"$kubelet_forward_port"}; do
        port_free "$port" || die "127.0.0.1:$port is in use"
    done
    rm -rf "$run"
    mkdir -p "$run/logs"
    # A start that fails shows why and leaves nothing running.
    trap start_failed EXIT
    local start=$SECONDS
    make_certs

    log "starting etcd on 127.0.0.1:$etcd_port"
    spawn etcd "$bin/etcd" --name e2e --data-dir "$run/etcd" \
        --listen-client-urls "http://127.0.0.1:$etcd_port" \
        --advertise-client-urls "http://127.0.0.1:$etcd_port" \
        --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
        --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
        --initial-cluster "e2e=http://127.0.0.1:$etcd_peer_port" \
        --unsafe-no-fsync --log-level warn
    wait_for "etcd" "$ready_timeout" curl -fsS "http://127.0.0.1:$etcd_port/health"

    write_kubeconfig "$run/admin.kubeconfig" \
        "https://127.0.0.1:$api_port" "$admin_token"
    write_kubeconfig "$run/admin-guest.kubeconfig" \
        "https://$guest_host_ip:$api_port" "$admin_token"
    start_apiserver
    local pki="$run/pki"
    log "kube-apiserver ready after $((SECONDS - start))s"

    # Without a kubelet the Node never heartbeats: node lifecycle and
    # taint eviction would taint it and evict the test's Pods. A real
    # node gets all of it, and its podCIDR.
    local controllers=(--controllers '*,-nodelifecycle,-taint-eviction-controller')
    if [[ -n $real_node ]]; then
        controllers=(--controllers '*' --allocate-node-cidrs
            --cluster-cidr "$cluster_cidr" --node-cidr-mask-size 24)
    fi
    log "starting kube-controller-manager"
    spawn kube-controller-manager "$bin/kube-controller-manager" \
        --kubeconfig "$run/admin.kubeconfig" \
        --authentication-kubeconfig "$run/admin.kubeconfig" \
        --authorization-kubeconfig "$run/admin.kubeconfig" \
        --bind-address 127.0.0.1 --secure-port 0 \
        --leader-elect=false \
        "${controllers[@]}" \
        --service-account-private-key-file "$pki/sa.key" \
        --root-ca-file "$pki/ca.crt" \
        --service-cluster-ip-range "$service_range" \
        --profiling=false
    # The ServiceAccount controller creating `default` shows that the
    # controllers run; Pods cannot be admitted before it.
    wait_for "the controller manager (default ServiceAccount)" \
        "$ready_timeout" kubectl -n default get serviceaccount default

    if [[ -n $real_node ]]; then
        log "starting kube-scheduler"
        spawn kube-scheduler "$bin/kube-scheduler" \
            --kubeconfig "$run/admin.kubeconfig" \
            --authentication-kubeconfig "$run/admin.kubeconfig" \
            --authorization-kubeconfig "$run/admin.kubeconfig" \
            --bind-address 127.0.0.1 --secure-port 0 \
            --leader-elect=false --profiling=false
        write_kubelet_kubeconfig "$run/kubelet.kubeconfig" "$node_name" "$pki/node"
        local n
        for n in $node_names; do
            write_kubelet_kubeconfig "$run/kubelet-$n.kubeconfig" "$n" "$pki/node-$n"
        done
        # socat's default backlog is 5, and the API server's connect() to
        # a Unix socket whose queue is full fails at once (EAGAIN): the
        # suite's proxy test sends 16 requests together.
        spawn egress socat "UNIX-LISTEN:$run/egress.sock,fork,unlink-early,backlog=128" \
            "TCP:127.0.0.1:$kubelet_forward_port"
    else
        register_node
        apply_deploy
    fi

    # Lets a test in the guest stop and restart the API server.
    # -t: a client that half-closes after its line still gets the answer,
    # which comes only when the API server has stopped or is ready.
    spawn control socat -t "$ready_timeout" \
        "TCP-LISTEN:$control_port,bind=127.0.0.1,reuseaddr,fork" \
        "EXEC:$here/control-plane.sh control-request"

    # A real node's proxy gets its token in its Pod.
    if [[ -z $real_node ]]; then
        local token
        token=$(kubectl -n kube-system create token kube-ipvs-proxy --duration 24h)
        write_kubeconfig "$run/proxy.kubeconfig" \
            "https://$guest_host_ip:$api_port" "$token"
        write_kubeconfig "$run/proxy-host.kubeconfig" \
            "https://127.0.0.1:$api_port" "$token"
    fi
    trap - EXIT
    log "ready after $((SECONDS - start))s; run folder $run"
}

cmd_stop() {
    local name
    for name in control egress kube-scheduler kube-controller-manager \
        kube-apiserver etcd; do
        stop_process "$name"
    done
    rm -rf "$run"
    log "stopped"
}

cmd_env() {
    [[ -f "$run/admin.kubeconfig" ]] || die "not running (no $run)"
    printf 'export KUBECONFIG=%q\n' "$run/admin.kubeconfig"
    printf 'export E2E_PROXY_KUBECONFIG=%q\n' "$run/proxy.kubeconfig"
    printf 'export E2E_PROXY_HOST_KUBECONFIG=%q\n' "$run/proxy-host.kubeconfig"
    printf 'export E2E_ADMIN_GUEST_KUBECONFIG=%q\n' "$run/admin-guest.kubeconfig"
    printf 'export E2E_VM_HOST_PORTS=%q\n' "$api_port $control_port"
    printf 'export E2E_NODE_NAME=%q\n' "$node_name"
    printf 'export E2E_NODE_IP=%q\n' "$node_ip"
    printf 'export E2E_APISERVER_PORT=%q E2E_CONTROL_PORT=%q\n' "$api_port" "$control_port"
    if [[ -f $run/kubelet.kubeconfig ]]; then
        printf 'export E2E_KUBELET_KUBECONFIG=%q\n' "$run/kubelet.kubeconfig"
        printf 'export E2E_CA_CERT=%q\n' "$run/pki/ca.crt"
        printf 'export E2E_VM_GUEST_PORTS=%q\n' "$kubelet_forward_port:10260"
    fi
    printf 'export PATH=%q:"$PATH"\n' "$bin"
}

# Prints the EndpointSlice endpoints of a Service as "ip:ready" lines.
slice_endpoints() {
    kubectl -n "$1" get endpointslices -l "kubernetes.io/service-name=$2" \
        -o jsonpath='{range .items[*].endpoints[*]}{.addresses[0]}:{.conditions.ready}{"\n"}{end}'
}

# No kubelet confirms a Pod's deletion, so Pods bound to the node would stay
# Terminating (and their namespace with them) unless force-deleted.
delete_namespace() {
    kubectl -n "$1" delete pods --all --grace-period=0 --force \
        >/dev/null 2>&1 || true
    kubectl delete namespace "$1" --ignore-not-found --wait="${2:-true}" \
        >/dev/null
}

# A request on the control port, as a test in the guest makes it.
control_request() {
    exec 3<>"/dev/tcp/127.0.0.1/$control_port"
    echo "$1" >&3
    cat <&3
    exec 3<&-
}

ds_pod_exists() {
    kubectl -n kube-system get pods -l app.kubernetes.io/name=kube-ipvs-proxy \
        -o jsonpath='{.items[*].spec.affinity.nodeAffinity}' |
        grep -q "$node_name"
}

slice_has() { slice_endpoints "$1" "$2" | grep -qx "$3"; }

cmd_check() {
    pid_alive kube-apiserver || die "not running; start it first"
    local ns=e2e-smoke pod_ip=198.19.0.2
    kubectl get --raw /readyz >/dev/null
    delete_namespace "$ns"
    kubectl create namespace "$ns" >/dev/null
    wait_for "default ServiceAccount in $ns" 60 \
        kubectl -n "$ns" get serviceaccount default
    kubectl -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector:
    app: web
  ports:
  - name: http
    port: 80
    targetPort: 8080
---
apiVersion: v1
kind: Pod
metadata:
  name: web-0
  labels:
    app: web
spec:
  nodeName: $node_name
  containers:
  - name: web
    image: e2e.invalid/none
    ports:
    - containerPort: 8080
EOF
    local cluster_ip
    cluster_ip=$(kubectl -n "$ns" get service web -o jsonpath='{.spec.clusterIP}')
    [[ $cluster_ip == 198.18.* ]] || die "Service IP $cluster_ip is not from $service_range"

    # What a kubelet would report: the Pod runs, has its address, is ready.
    local now patched
    now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    kubectl -n "$ns" patch pod web-0 --subresource=status --type=merge -p "{\"status\":{\"phase\":\"Running\",\"hostIP\":\"$node_ip\",\"hostIPs\":[{\"ip\":\"$node_ip\"}],\"podIP\":\"$pod_ip\",\"podIPs\":[{\"ip\":\"$pod_ip\"}],\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\",\"lastTransitionTime\":\"$now\"}]}}" >/dev/null
    patched=$SECONDS
    wait_for "the EndpointSlice with $pod_ip ready" 60 \
        slice_has "$ns" web "$pod_ip:true"
    log "check: Service $ns/web ($cluster_ip) has endpoint $pod_ip ready, $((SECONDS - patched))s after the status patch"

    # The controller also follows readiness.
    kubectl -n "$ns" patch pod web-0 --subresource=status --type=merge \
        -p '{"status":{"conditions":[{"type":"Ready","status":"False"}]}}' >/dev/null
    wait_for "the EndpointSlice with $pod_ip not ready" 60 \
        slice_has "$ns" web "$pod_ip:false"
    log "check: endpoint $pod_ip follows the Pod's readiness"

    # The proxy's token: what it needs, and no more.
    local p=("$bin/kubectl" --kubeconfig "$run/proxy-host.kubeconfig")
    "${p[@]}" get services,endpointslices,nodes -A >/dev/null ||
        die "the proxy's ServiceAccount cannot list what it watches"
    "${p[@]}" get node "$node_name" >/dev/null ||
        die "the proxy's ServiceAccount cannot get its Node"
    if "${p[@]}" -n "$ns" get pods >/dev/null 2>&1; then
        die "the proxy's ServiceAccount can list Pods; its role is too wide"
    fi
    if "${p[@]}" -n "$ns" delete service web --dry-run=server >/dev/null 2>&1; then
        die "the proxy's ServiceAccount can delete Services"
    fi
    # Events: created and patched through events.k8s.io (kube-rs'
    # recorder), nothing else.
    local verb
    for verb in create patch; do
        [[ $("${p[@]}" auth can-i "$verb" events.events.k8s.io -n default) == yes ]] ||
            die "the proxy's ServiceAccount cannot $verb events.k8s.io Events"
    done
    for verb in "update events.events.k8s.io" "create events" "delete events.events.k8s.io"; do
        # shellcheck disable=SC2086 # two words on purpose
        if [[ $("${p[@]}" auth can-i $verb -n default 2>/dev/null) == yes ]]; then
            die "the proxy's ServiceAccount can $verb; its role is too wide"
        fi
    done
    log "check: the proxy's ServiceAccount can watch its objects and nothing more"

    # The DaemonSet controller made its Pod for the node, so the Pod spec
    # passed admission (privileged, system-node-critical, its
    # ServiceAccount). Without a scheduler and a kubelet it stays Pending.
    wait_for "the DaemonSet's Pod for $node_name" 60 ds_pod_exists
    log "check: the DaemonSet's Pod was admitted"
    delete_namespace "$ns"

    # What a test in the guest does through guestfwd, here on loopback.
    local answer
    answer=$(control_request apiserver-stop)
    [[ $answer == ok* ]] || die "control port, apiserver-stop: $answer"
    if kubectl get --raw /readyz >/dev/null 2>&1; then
        die "the API server still answers after apiserver-stop"
    fi
    answer=$(control_request apiserver-start)
    [[ $answer == ok* ]] || die "control port, apiserver-start: $answer"
    kubectl get --raw /readyz >/dev/null
    log "check: the control port stops and restarts the API server"
    log "check: passed"
}

cmd_smoke() {
    cmd_start
    # Set after the start, which clears its own EXIT trap when it succeeds.
    trap cmd_stop EXIT
    cmd_check
}

case ${1:-} in
start) cmd_start ;;
smoke) cmd_smoke ;;
apiserver-stop) cmd_apiserver_stop ;;
apiserver-start) cmd_apiserver_start ;;
control-request) cmd_control_request ;;
stop) cmd_stop ;;
env) cmd_env ;;
check) cmd_check ;;
*) die "usage: $0 start|check|env|stop|smoke|apiserver-stop|apiserver-start" ;;
esac
