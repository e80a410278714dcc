#!/usr/bin/env bash
# Side by side with upstream kube-proxy: upstream's
# kube-proxy (IPVS mode) and ours live through the same scenario, one after
# the other, in the real-kernel guest against the loopback control plane
# (tests/e2e/control-plane.sh, already started); the kernel state each
# leaves is snapshotted after every step and the two diffed, step by step.
#
#   tests/conformance/run.sh [RUN...]      default: every scenario, a
#                                          takeover of each with traffic,
#                                          and one walk with SIGKILLs
#
# A RUN is one of:
#   NAME           scenarios/NAME.yaml (the format: tool/src/scenario.rs):
#                  upstream from a clean kernel through every step, a
#                  snapshot after each; upstream stopped, the kernel cleaned
#                  with our --cleanup and checked clean, the objects
#                  applied again from scratch when the scenario has steps;
#                  then ours the same way; every step's snapshots diffed.
#   random-SEED    the seeded random walk of CONFORMANCE_STEPS (30) steps,
#                  run as above (tool/src/walk.rs; the walk is kept in
#                  $TARGET/conformance/random-SEED.yaml)
#   random:N       N random walks on fresh seeds, printed
#   kill-SEED      a random walk of CONFORMANCE_KILL_STEPS (60) steps in
#                  which ours is killed with SIGKILL at about every other
#                  step, at a random moment up to CONFORMANCE_KILL_WITHIN_MS
#                  (4000) after the step's request (while the host applies
#                  it, while ours syncs it, or after), and started again:
#                  the kernel must converge to upstream's snapshot of the
#                  step; each kill's stage (what ours' debug log says it was
#                  doing, and which step's state the kernel was in) and
#                  convergence time is reported
#   kill:N         N of those on fresh seeds
#   takeover-NAME  the handover on scenario NAME, which has a Traffic
#                  document: each proxy's snapshot from a clean start; then
#                  upstream runs, traffic flows through the Traffic target
#                  to pods in the guest, upstream is stopped (no cleanup)
#                  and ours started over its state: after our first sync
#                  the kernel must equal our clean-start snapshot; then
#                  ours is stopped and upstream started again (the
#                  rollback): upstream's clean-start snapshot; and no
#                  request may fail
#
# How a step is run: the guest asks the host (where kubectl is fast) to
# apply it; the host applies it, each kubectl checked (a failure fails the
# run), waits until the real EndpointSlice controller has caught up with it
# (tool: `conformance settled`), then writes a marker: the Service
# conformance-marker's port and its slices' port become 1000+STEP and
# 20000+STEP, in both families. Watch events of one kind arrive in order,
# so once a proxy has programmed the marker of step N into IPVS (both
# families: upstream's two proxiers sync apart), it has synced everything
# the step changed. Then the snapshot must hold still for a second (two
# seconds after a Node change, which the marker does not cover); one still
# changing at the deadline fails the run, and so does one that lacks a
# section: no virtual server, kube-ipvs0 address or ipset member but the
# marker's while the namespace has Services a proxy programs, or no rule
# in nat or filter of a family. Every read of the kernel must succeed.
#
# Kernel-global state is reset to the guest's boot values before each
# proxy, read back (a value not back fails the run: ours would inherit
# upstream's), and compared after it: the IPVS timeouts (`ipvsadm -L --timeout`),
# every sysctl under net/ipv4/vs and net/netfilter (nf_conntrack_count
# aside), conntrack's hashsize, ip_forward, the arp_ignore/arp_announce and
# route_localnet of conf/all, IPv6 forwarding, and the mangle and raw
# tables of both families.
#
# With CONFORMANCE_SPLIT=1 every scenario and walk (not the takeovers) has
# a third pass, after ours: ours fed by the API/node split, an API side
# (`kube-ipvs-proxy api-server`) watching the control plane and serving
# the node's view on a unix socket, and ours with --api-endpoint on it;
# its snapshots are diffed against upstream's like ours'. In a walk with
# SIGKILLs that pass kills the API side instead, at the same moments, and
# starts it again at once: the node keeps its kernel state, resumes or
# takes a full state from the new instance, and must converge to
# upstream's snapshot of the step.
#
# Differences chosen on purpose are listed, with their reason and the
# lines they excuse, in differences.md; the diff ignores exactly those.
# Prints, per run, "identical" or the differences, then a summary; exits 1
# if any run differs or fails. Environment: K8S_VERSION (the release of the
# control plane and of upstream's kube-proxy, tests/kubernetes/release.sh),
# E2E_UPSTREAM_PROXY (the kube-proxy binary, that release's), CONFORMANCE_SYNC_TIMEOUT
# (60 seconds per step), CONFORMANCE_FAMILIES (the IP families both proxies
# must have synced, 2), CONFORMANCE_CLEANUP_UPSTREAM and
# CONFORMANCE_CLEANUP_OURS (whose --cleanup runs after upstream and after
# ours: ours (default) or upstream), CONFORMANCE_VERBOSE (print upstream's
# snapshots), CONFORMANCE_PORT (the host's request port, the control port
# + 1). The report is also written to $TARGET/conformance/report.txt.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}

log() { printf '%s conformance: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# ---------------------------------------------------------------- host side

hostwork=$target/conformance
tool=$hostwork/bin/conformance
settle_timeout=${CONFORMANCE_SETTLE_TIMEOUT:-60}

# Every kubectl of a step must succeed; its output goes to the log.
kc() {
    if ! kubectl "$@"; then
        echo "FAILED: kubectl $*"
        return 1
    fi
}

# apply_step NS FILE: one step's objects, statuses, patches and deletions.
apply_step() {
    local ns=$1 file=$2 tmp=$hostwork/tmp-$1
    mkdir -p "$tmp"
    # Server-side: each apply owns its fields, and one that a step leaves
    # out goes (a port renumbered keeps its node port; client-side apply's
    # merge would keep the old port beside the new one).
    if (($(jq '.apply.items | length' "$file") > 0)); then
        jq '.apply' "$file" >"$tmp/apply.json"
        kc -n "$ns" apply --server-side --force-conflicts \
            --field-manager=conformance -f "$tmp/apply.json" || return 1
    fi
    if (($(jq '.status.items | length' "$file") > 0)); then
        jq '.status' "$file" >"$tmp/status.json"
        kc -n "$ns" apply --server-side --subresource=status \
            --force-conflicts --field-manager=conformance-status \
            -f "$tmp/status.json" || return 1
    fi
    local n i kind name type sub patch
    n=$(jq '.patch | length' "$file")
    for ((i = 0; i < n; i++)); do
        kind=$(jq -r ".patch[$i].kind" "$file")
        name=$(jq -r ".patch[$i].name" "$file")
        type=$(jq -r ".patch[$i].type" "$file")
        sub=$(jq -r ".patch[$i].subresource // empty" "$file")
        patch=$(jq -r ".patch[$i].patch" "$file")
        local where=(-n "$ns")
        [[ $kind == node ]] && where=()
        kc "${where[@]}" patch "$kind" "$name" --type "$type" \
            ${sub:+--subresource "$sub"} -p "$patch" || return 1
    done
    local ref
    for ref in $(jq -r '.delete[]' "$file"); do
        kc -n "$ns" delete "$ref" --wait=false || return 1
    done
    for ref in $(jq -r '.forceDelete[]' "$file"); do
        kc -n "$ns" delete "$ref" --grace-period=0 --force || return 1
    done
}

# settle NS: until the EndpointSlice controller and the garbage collector
# have caught up with the namespace.
settle() {
    local ns=$1 tmp=$hostwork/tmp-$1 deadline=$((SECONDS + settle_timeout))
    mkdir -p "$tmp"
    while :; do
        kubectl -n "$ns" get services,pods,endpointslices -o json >"$tmp/objects.json"
        kubectl get nodes -o json >"$tmp/nodes.json"
        "$tool" settled "$tmp/objects.json" "$tmp/nodes.json" >"$tmp/settle.out" && return 0
        if ((SECONDS >= deadline)); then
            echo "FAILED: the EndpointSlice controller did not catch up in ${settle_timeout}s:"
            cat "$tmp/settle.out"
            return 1
        fi
        sleep 0.3
    done
}

# How many Services of the namespace a proxy programs (the marker aside).
service_count() {
    kubectl -n "$1" get services -o json | jq '[.items[]
        | select(.metadata.name != "conformance-marker")
        | select(.spec.type != "ExternalName" and .spec.clusterIP != "None")
        | select((.metadata.labels // {})["service.kubernetes.io/service-proxy-name"] == null)
        ] | length'
}

# The Node as the run found it, restored after each scenario.
save_node() {
    kubectl get node "$E2E_NODE_NAME" -o json |
        jq '{labels: .metadata.labels, addresses: .status.addresses}' \
            >"$hostwork/node.json"
}

restore_node() {
    local saved=$hostwork/node.json
    kubectl get node "$E2E_NODE_NAME" -o json | jq --slurpfile saved "$saved" '
        {metadata: {labels: ((.metadata.labels | with_entries(.value = null))
                             + $saved[0].labels)}}' >"$hostwork/node-patch.json"
    kc patch node "$E2E_NODE_NAME" --type merge \
        -p "$(cat "$hostwork/node-patch.json")" >/dev/null
    kc patch node "$E2E_NODE_NAME" --subresource=status --type merge \
        -p "$(jq -c '{status: {addresses: .addresses}}' "$saved")" >/dev/null
}

delete_namespace() {
    kubectl -n "$1" delete pods --all --grace-period=0 --force \
        >/dev/null 2>&1 || true
    kubectl delete namespace "$1" --ignore-not-found --wait=true >/dev/null
}

# host_step RUN I: step I of the run (0: a fresh namespace with the
# initial objects), settled, then the marker.
host_step() {
    local run=$1 i=$2 ns=conf-$1 dir=$hostwork/$1
    if ((i == 0)); then
        delete_namespace "$ns"
        restore_node
        kc create namespace "$ns" >/dev/null
        # Pods cannot be admitted before the default ServiceAccount.
        local n
        for n in $(seq 120); do
            kubectl -n "$ns" get serviceaccount default >/dev/null 2>&1 && break
            sleep 0.5
        done
    fi
    apply_step "$ns" "$dir/step-$i.json" &&
        settle "$ns" &&
        "$tool" marker "$i" >"$hostwork/tmp-$ns/marker.json" &&
        kc -n "$ns" apply -f "$hostwork/tmp-$ns/marker.json" >/dev/null &&
        echo "services=$(service_count "$ns")" >"$hostwork/tmp-$ns/answer"
}

# The guest's requests, one line each on the request port: "step RUN I"
# (0: the initial objects in a fresh namespace conf-RUN) and "delete RUN".
# Answers "ok" and facts (services=N), or "error" and the log.
host_request() {
    local request verb run i out=$hostwork/request.out
    IFS= read -r request || exit 0
    read -r verb run i <<<"${request%$'\r'}"
    if [[ ! $run =~ ^[a-z0-9-]+$ || ! -d $hostwork/$run ]]; then
        echo "error: no run '$run'"
        return
    fi
    rm -f "$hostwork/tmp-conf-$run/answer"
    if case $verb in
        step) [[ $i =~ ^[0-9]+$ ]] && host_step "$run" "$i" >"$out" 2>&1 ;;
        delete) { delete_namespace "conf-$run" && restore_node; } >"$out" 2>&1 ;;
        *) echo "unknown request '$verb' (step, delete)" >"$out" && false ;;
        esac then
        echo "ok $(cat "$hostwork/tmp-conf-$run/answer" 2>/dev/null || true)"
    else
        echo error
        cat "$out"
    fi
}

# The runs the arguments name, with random:N and kill:N drawn.
expand_runs() {
    local word n
    for word in "$@"; do
        case $word in
        random:* | kill:*)
            for ((n = 0; n < ${word#*:}; n++)); do
                echo "${word%%:*}-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')"
            done
            ;;
        *) echo "$word" ;;
        esac
    done
}

default_runs() {
    local f
    for f in "$here"/scenarios/*.yaml; do
        basename "$f" .yaml
    done
    for f in "$here"/scenarios/*.yaml; do
        grep -q '^kind: *Traffic' "$f" && echo "takeover-$(basename "$f" .yaml)"
    done
    echo kill:1
}

# prepare RUN: the run's scenario file, split into $hostwork/RUN.
prepare() {
    local run=$1 file dir=$hostwork/$1
    case $run in
    random-*)
        file=$hostwork/$run.yaml
        "$tool" walk "${run#random-}" --steps "${CONFORMANCE_STEPS:-30}" >"$file"
        ;;
    kill-*)
        file=$hostwork/$run.yaml
        "$tool" walk "${run#kill-}" --steps "${CONFORMANCE_KILL_STEPS:-60}" \
            --kill-within "${CONFORMANCE_KILL_WITHIN_MS:-4000}" >"$file"
        ;;
    takeover-*) file=$here/scenarios/${run#takeover-}.yaml ;;
    *) file=$here/scenarios/$run.yaml ;;
    esac
    [[ -f $file ]] || { log "no scenario $file for run $run"; return 1; }
    rm -rf "$dir"
    "$tool" split "$file" "$hostwork/base.yaml" "$dir" >/dev/null
    if [[ $run == takeover-* ]] && [[ ! -s $dir/traffic.env ]]; then
        log "$file has no Traffic document for $run"
        return 1
    fi
}

# A second node, for endpoints that are not ours.
add_node_b() {
    kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: node-b
  labels: {kubernetes.io/hostname: node-b, topology.kubernetes.io/zone: zone-b}
EOF
    kubectl patch node node-b --subresource=status --type=merge \
        -p '{"status":{"addresses":[{"type":"InternalIP","address":"198.18.100.2"}]}}' >/dev/null
}

case ${1:-} in
--request)
    host_request
    exit
    ;;
--in-guest) ;;
*)
    eval "$("$repo/tests/e2e/control-plane.sh" env)"
    cd "$repo"
    cargo build -p kube-ipvs-proxy --bin kube-ipvs-proxy \
        -p conformance-tool -p testkit --bins
    # Copies: the target folder may be shared, and a build there during
    # the run would swap a binary under it.
    mkdir -p "$hostwork/bin"
    for b in kube-ipvs-proxy conformance testpod traffic; do
        cp "$target/debug/$b" "$hostwork/bin/$b"
    done
    k8s_bin=$(dirname "$(command -v kubectl)")
    export E2E_UPSTREAM_PROXY=${E2E_UPSTREAM_PROXY:-$k8s_bin/kube-proxy}
    # shellcheck disable=SC2046 # one word per run
    mapfile -t runs < <(if (($#)); then expand_runs "$@"; else expand_runs $(default_runs); fi)
    # The base configuration, as kubeadm writes its kube-proxy ConfigMap
    # (the conntrack section all null, so upstream's defaults apply).
    cat >"$hostwork/base.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: ipvs
hostnameOverride: $E2E_NODE_NAME
clientConnection:
  kubeconfig: $E2E_ADMIN_GUEST_KUBECONFIG
conntrack:
  maxPerCore: null
  min: null
  tcpBeLiberal: false
  tcpCloseWaitTimeout: null
  tcpEstablishedTimeout: null
  udpStreamTimeout: 0s
  udpTimeout: 0s
EOF
    for run in "${runs[@]}"; do
        prepare "$run"
    done
    log "runs: ${runs[*]}"
    export CONFORMANCE_RUNS="${runs[*]}"
    export CONFORMANCE_WORK=$hostwork
    # The control port's neighbour: free while control-plane.sh runs.
    export CONFORMANCE_PORT=${CONFORMANCE_PORT:-$((${E2E_VM_HOST_PORTS##* } + 1))}
    # node-a's zone, for the scenarios with topology hints.
    kubectl label node "$E2E_NODE_NAME" --overwrite \
        topology.kubernetes.io/zone=zone-a >/dev/null
    add_node_b
    save_node
    socat -t "$((settle_timeout * 2))" \
        "TCP-LISTEN:$CONFORMANCE_PORT,bind=127.0.0.1,reuseaddr,fork" \
        "EXEC:$here/run.sh --request" </dev/null &
    server=$!
    trap 'kill $server 2>/dev/null || true' EXIT
    rc=0
    VM_HOST_PORTS="$E2E_VM_HOST_PORTS $CONFORMANCE_PORT" \
        VM_TIMEOUT=${VM_TIMEOUT:-$((1800 + 900 * ${#runs[@]}))} \
        VM_PASS_ENV="CARGO_TARGET_DIR E2E_UPSTREAM_PROXY E2E_NODE_NAME \
CONFORMANCE_RUNS CONFORMANCE_SYNC_TIMEOUT CONFORMANCE_FAMILIES \
CONFORMANCE_VERBOSE CONFORMANCE_UPSTREAM_ARGS CONFORMANCE_FREEZE_UPSTREAM \
CONFORMANCE_PORT CONFORMANCE_WORK CONFORMANCE_SPLIT CONFORMANCE_STALL \
CONFORMANCE_CLEANUP_UPSTREAM CONFORMANCE_CLEANUP_OURS" \
        tests/vm/run tests/conformance/run.sh --in-guest |
        tee "$hostwork/report.txt" || rc=$?
    exit "$rc"
    ;;
esac

# --------------------------------------------------------------- guest side

bin=$CONFORMANCE_WORK/bin
ours=$bin/kube-ipvs-proxy
upstream=$E2E_UPSTREAM_PROXY
sync_timeout=${CONFORMANCE_SYNC_TIMEOUT:-60}
all_families=${CONFORMANCE_FAMILIES:-2}
families=$all_families
split=${CONFORMANCE_SPLIT:-0}
work=/tmp/conformance
mkdir -p "$work"
export TESTKIT_TESTPOD=$bin/testpod
# A descriptor that never has anything to read: `read -t` on it is a
# sleep without a process.
mkfifo "$work/never"
exec 9<>"$work/never"
# Progress goes to the console as it happens; each run's own output is
# printed when it ends.
exec 4>&2
log() {
    printf '%s conformance: %s\n' "$(date -u +%H:%M:%S)" "$*" >&4
    : >"$work/progress"
}

# What the run is waiting for, for the watchdog to say when it is stuck.
doing() {
    printf '%s %s %s: %s\n' "$(date -u +%H:%M:%S)" "${run:-}" "${proxy_label:-}" "$*" \
        >"$work/doing"
}

# A run that logs nothing for CONFORMANCE_STALL (600) seconds is stuck
# where no timeout of its own covers it. The watchdog prints what the
# guest is doing then, while it is still doing it: the guest's own limit
# would end the run hours later, with no word of where it was.
watchdog() {
    local quiet=0 reported=0 f
    : >"$work/progress-seen"
    while :; do
        read -r -t 30 -u 9 || true
        if [[ $work/progress -nt $work/progress-seen ]]; then
            : >"$work/progress-seen"
            quiet=0 reported=0
            continue
        fi
        quiet=$((quiet + 30))
        ((quiet >= ${CONFORMANCE_STALL:-600} && !reported)) || continue
        reported=1
        # Most useful last: a CI log is often read from its tail only.
        {
            echo "=== conformance: nothing logged for ${quiet}s; the guest's processes:"
            ps -eo pid,ppid,stat,etime,wchan:32,args
            guest_state
            for f in $(ls -t "$work"/*.out "$work"/*/*.log 2>/dev/null | head -n 4); do
                echo "--- the end of $f:"
                tail -n 30 "$f"
            done
            echo "=== conformance: the newest processes (pid ppid state elapsed wchan):"
            ps -eo pid,ppid,stat,etime,wchan:24,args --sort=start_time |
                awk '$6 !~ /^\[/' | tail -n 12 | cut -c1-150
            echo "=== conformance: stuck for ${quiet}s at: $(cat "$work/doing" 2>/dev/null)"
        } >&4 2>&1
        # A stuck run would hold everything after it until the guest's
        # limit: it ends here, failed, with the report above.
        if [[ ${CONFORMANCE_STALL_ABORT:-1} == 1 ]]; then
            echo "=== conformance: ending the run" >&4
            kill -TERM "$main_pid" 2>/dev/null || true
            return
        fi
    done
}

now_ms() { echo $((${EPOCHREALTIME/./} / 1000)); }

# A request to the host's side (host_request); its answer's facts are
# left in $answer.
answer=
request() {
    doing "asking the host: $1"
    exec 3<>"/dev/tcp/10.0.2.100/$CONFORMANCE_PORT"
    echo "$1" >&3
    # Bounded: a connection whose end never reaches the guest would hold
    # the run. The host settles for at most two minutes.
    answer=$(timeout 300 cat <&3)
    exec 3<&-
    if [[ $answer == ok* ]]; then
        answer=${answer#ok }
        return 0
    fi
    printf '%s\n' "$answer"
    return 1
}

# The kernel state a proxy owns, normalised (tool/src/snapshot.rs).
snapshot() {
    "$bin/conformance" snapshot && return 0
    # A read that did not finish (the tool's limit) says what hung it.
    echo "snapshot failed" >&2
    guest_state "${proxy_pid:-}" >&2
    return 1
}

# Kernel-global state either proxy may write; read with builtins (a
# process costs ~0.1 s in the guest).
sysctl_files=()
collect_sysctl_files() {
    local f
    for f in /proc/sys/net/ipv4/vs/* /proc/sys/net/netfilter/nf_conntrack_* \
        /sys/module/nf_conntrack/parameters/hashsize \
        /proc/sys/net/ipv4/ip_forward /proc/sys/net/ipv6/conf/all/forwarding \
        /proc/sys/net/ipv4/conf/all/arp_ignore \
        /proc/sys/net/ipv4/conf/all/arp_announce \
        /proc/sys/net/ipv4/conf/all/route_localnet \
        /proc/sys/net/bridge/bridge-nf-call-iptables; do
        [[ -f $f && -r $f && $f != */nf_conntrack_count ]] && sysctl_files+=("$f")
    done
    return 0
}

# The rules and chains of its own a table holds, counters dropped; fails
# if the save does: an empty table and a failed save must not look alike.
table_state() {
    local text
    text=$("$1-save" -t "$2") || {
        echo "$1-save -t $2 failed"
        return 1
    }
    text=${text//$'\r'/}
    local line
    while IFS= read -r line; do
        [[ $line == -A* || $line == :*' - '* ]] || continue
        printf '%s\n' "${line% \[*:*\]}"
    done <<<"$text"
}

globals() {
    local ok=0
    echo "## ipvsadm -L --timeout"
    ipvsadm -L --timeout || ok=1
    echo "## sysctls"
    local f v
    for f in "${sysctl_files[@]}"; do
        read -r v <"$f" || v="(unreadable)"
        printf '%s %s\n' "${f#/proc/sys/}" "${v//$'\t'/ }"
    done
    local tool table text
    for tool in iptables ip6tables; do
        for table in mangle raw; do
            echo "## $tool-save -t $table"
            # A failed save fails: on both sides it would give the same
            # empty section.
            if text=$("$tool-save" -t "$table"); then
                [[ -z $text ]] || sed -e '/^#/d' -e 's/\[[0-9]*:[0-9]*\]$//' <<<"$text"
            else
                echo "$tool-save -t $table failed"
                ok=1
            fi
        done
    done
    return $ok
}

# Back to the boot values, then read back: upstream runs first, and ours
# must not inherit what upstream set, or the global-state diff would pass
# without ours having set anything. Fails if anything is not back.
reset_globals() {
    local f boot now tcp tcpfin udp ok=0
    read -r _ _ _ _ tcp tcpfin udp <<<"$(ipvsadm -L --timeout)"
    if [[ "$tcp $tcpfin $udp" != "$boot_timeouts" ]]; then
        # shellcheck disable=SC2086 # three numbers
        ipvsadm --set $boot_timeouts || echo "ipvsadm --set $boot_timeouts failed"
    fi
    for f in "${sysctl_files[@]}"; do
        boot=${boot_sysctls[$f]}
        read -r now <"$f" || continue
        [[ $now == "$boot" ]] && continue
        echo "$boot" >"$f" || echo "cannot write $boot to $f (is $now)"
    done
    # Chains of its own (upstream's canaries have no rule) as well as
    # rules.
    local tool table state
    for tool in iptables ip6tables; do
        for table in mangle raw; do
            state=$(table_state "$tool" "$table") || {
                echo "$state"
                ok=1
                continue
            }
            if [[ -n $state ]]; then
                "$tool" -t "$table" -F || ok=1
                "$tool" -t "$table" -X || ok=1
            fi
        done
    done
    # The read back, with builtins but for the tools.
    read -r _ _ _ _ tcp tcpfin udp <<<"$(ipvsadm -L --timeout)"
    if [[ "$tcp $tcpfin $udp" != "$boot_timeouts" ]]; then
        echo "cannot reset the IPVS timeouts to $boot_timeouts (are $tcp $tcpfin $udp)"
        ok=1
    fi
    for f in "${sysctl_files[@]}"; do
        read -r now <"$f" || now="(unreadable)"
        if [[ $now != "${boot_sysctls[$f]}" ]]; then
            echo "cannot reset $f to ${boot_sysctls[$f]} (is $now)"
            ok=1
        fi
    done
    for tool in iptables ip6tables; do
        for table in mangle raw; do
            if ! state=$(table_state "$tool" "$table") || [[ -n $state ]]; then
                echo "cannot empty $tool -t $table:"
                echo "$state"
                ok=1
            fi
        done
    done
    return $ok
}

force_clean() {
    local t save
    for save in iptables ip6tables; do
        for t in nat filter mangle raw; do
            "$save-save" -t "$t" 2>/dev/null | grep -v -- 'KUBE-' |
                "$save-restore" 2>/dev/null || true
        done
    done
    ipvsadm -C
    ip link del kube-ipvs0 2>/dev/null || true
    for t in $(ipset list -n | grep '^KUBE-'); do
        ipset destroy "$t" 2>/dev/null || true
    done
}

# The proxy under test: its label, binary, pid and log.
proxy_pid=
proxy_label=
start_proxy() {
    local binary=$ours extra=()
    if [[ $proxy_label == upstream ]]; then
        binary=$upstream
        # shellcheck disable=SC2206 # words on purpose
        extra=(${CONFORMANCE_UPSTREAM_ARGS:-})
    elif [[ $proxy_label == split ]]; then
        [[ -n $api_pid ]] || start_api_side
        extra=(--api-endpoint "unix://$api_socket")
    fi
    echo "--- started $(date -u +%T)" >>"$dir/$proxy_label.log"
    # Ours logs each sync's start, writes and end at debug: a SIGKILL's
    # stage is read from there.
    RUST_LOG=${RUST_LOG:-info,kube_ipvs_proxy=debug} \
        "$binary" --config "$config" "${extra[@]}" >>"$dir/$proxy_label.log" 2>&1 &
    proxy_pid=$!
    fresh=1
}

# The split's API side: one watch of the control plane, the node's view
# served on a unix socket.
api_pid=
api_socket=$work/api.sock
start_api_side() {
    echo "--- started $(date -u +%T)" >>"$dir/api-side.log"
    RUST_LOG=${RUST_LOG:-info,kube_ipvs_proxy=debug} \
        "$ours" api-server --config "$config" --listen "unix://$api_socket" \
        >>"$dir/api-side.log" 2>&1 &
    api_pid=$!
}

# running PID: whether the child PID has not exited. Not `kill -0`: a
# child that exited stays a zombie until bash reaps it, which a loop of
# builtins (the polls below that start no process) never lets it do, and
# `kill -0` still finds a zombie: such a loop waited forever on a watcher
# that had long ended.
running() {
    local stat
    { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
    stat=${stat##*) }
    [[ ${stat%% *} != Z ]]
}

# end_process PID SIGNAL WHAT: PID stopped with SIGNAL, with SIGKILL after
# 10 s; fails, with what the guest is doing, if it outlives that too.
end_process() {
    local pid=$1 signal=$2 what=$3
    doing "stopping $what with SIG$signal"
    kill "-$signal" "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
        running "$pid" || break
        sleep 0.2
    done
    kill -9 "$pid" 2>/dev/null || true
    # A process stuck in the kernel outlives SIGKILL until its call
    # returns: `wait` would hold the run until the guest's timeout.
    for _ in $(seq 150); do
        running "$pid" || break
        sleep 0.2
    done
    if running "$pid"; then
        echo "$what (pid $pid) still there 30s after SIGKILL"
        guest_state "$pid"
        # For the loop over runs, whichever of the run's checks saw it
        # first: the next run must not start over it.
        outlived=1
        return 1
    fi
    wait "$pid" 2>/dev/null || true
}

# Both fail if the process outlived SIGKILL: the next would start over
# it, and two proxies would write the same kernel.
stop_api_side() {
    local rc=0
    [[ -n $api_pid ]] || return 0
    end_process "$api_pid" "${1:-TERM}" "the API side" || rc=1
    api_pid=
    return $rc
}

stop_proxy() {
    local rc=0
    [[ -n $proxy_pid ]] || return 0
    end_process "$proxy_pid" "${1:-TERM}" "$proxy_label" || rc=1
    proxy_pid=
    return $rc
}

# guest_state [PID]: what the guest's processes are doing, for a run that
# hangs: each thread's state and wait channel, and the kernel stack of
# every thread that is blocked (D) or of PID.
guest_state() {
    local task key state
    echo "--- the guest's threads (pid tid state elapsed wchan command):"
    ps -eLo pid,tid,stat,etime,wchan:32,comm 2>&1 | awk '$6 != "ps"'
    # Builtins only: a process per task would take minutes in the guest.
    for task in /proc/[0-9]*/task/[0-9]*; do
        state=
        while read -r key state _; do
            [[ $key == State: ]] && break
        done <"$task/status" 2>/dev/null || continue
        if [[ $state == D || ( -n ${1:-} && $task == /proc/$1/* ) ]]; then
            echo "--- $task ($(<"$task/comm"), $state):"
            cat "$task/stack" 2>/dev/null || true
        fi
    done
}

proxy_died() {
    echo "$proxy_label exited; the end of its log:"
    tail -n 20 "$dir/$proxy_label.log"
}

# wait_synced STEP OUT [node]: until the proxy has synced STEP (and, after
# a start, every family), then until the snapshot holds still (two seconds
# after a Node change, which the marker does not cover); writes the
# snapshot to OUT (tool/src/marker.rs).
fresh=1
wait_synced() {
    local i=$1 out=$2 still=1 args=()
    [[ ${3:-} == node ]] && still=2
    ((fresh)) && args+=(--fresh)
    doing "waiting for step $i to be synced"
    if ! wait_out=$("$bin/conformance" wait "$i" "$out" --pid "$proxy_pid" \
        --still "$still" --timeout "$sync_timeout" --families "$families" "${args[@]}"); then
        echo "$proxy_label, step $i: $wait_out; the end of its log:"
        tail -n 20 "$dir/$proxy_label.log"
        [[ $wait_out == *"did not finish"* ]] && guest_state "$proxy_pid"
        return 1
    fi
    fresh=0
}

# check_clean WHAT: the kernel must be as it was before any proxy ran.
check_clean() {
    local now
    now=$(snapshot)
    if [[ $now != "$empty" ]]; then
        echo "$1 left the kernel unclean:"
        # No /dev/fd in the guest: no process substitution.
        printf '%s\n' "$empty" >"$work/empty.txt"
        printf '%s\n' "$now" >"$work/now.txt"
        diff "$work/empty.txt" "$work/now.txt" | grep '^>' || true
        force_clean
        return 1
    fi
}

# What differences.md excuses (its own header says how it is written), as
# KIND<TAB>RELEASE<TAB>RUN<TAB>TEXT<TAB>HEADING lines; RELEASE and RUN are
# empty for an excuse of every run at every release.
release=$("$upstream" --version 2>/dev/null | awk '{ print $2 }')
release_minor=${release%.*}
excuses=$work/excuses
awk -v OFS='\t' '
    /^## / { heading = substr($0, 4); next }
    /^ignore: / { text = $0; sub(/^ignore: */, "", text); print "ignore", "", "", text, heading; next }
    /^(ignore|ignore-section|skip) v[0-9]+\.[0-9]+ [^ :]+:/ {
        run = $3; sub(/:$/, "", run); text = $0; sub(/^[^:]*: */, "", text)
        print $1, $2, run, text, heading
    }' "$here/differences.md" >"$excuses"

# excuse KIND RUN: the TEXT of each excuse of that kind for RUN at this
# release, one a line.
excuse() {
    awk -F'\t' -v kind="$1" -v run="$2" -v release="$release_minor" '
        $1 == kind && ($2 == "" || ($2 == release && $3 == run)) { print $4 }' "$excuses"
}

# excused_by RUN: the headings of the excuses made for RUN at this
# release alone, joined by "; ".
excused_by() {
    awk -F'\t' -v run="$1" -v release="$release_minor" '
        $2 == release && $3 == run && !seen[$5]++ { printf "%s%s", (n++ ? "; " : ""), $5 }' "$excuses"
}

# use_excuses RUN: what compare below excuses while RUN runs: the lines
# that match an `ignore` pattern, and every line of a snapshot section
# whose `## ` header matches an `ignore-section` pattern.
ignores=$work/ignores
ignored_sections=$work/ignored-sections
use_excuses() {
    excuse ignore "$1" >"$ignores"
    excuse ignore-section "$1" >"$ignored_sections"
    # grep -f with no pattern at all matches nothing, not everything.
    [[ -s $ignores ]] || echo '^$never^' >"$ignores"
    [[ -s $ignored_sections ]] || echo '^$never^' >"$ignored_sections"
}
use_excuses ''

# without_ignored_sections FILE: the snapshot without its excused sections.
without_ignored_sections() {
    local line drop=0
    while IFS= read -r line; do
        if [[ $line == '## '* ]]; then
            drop=0
            grep -q -E -f "$ignored_sections" <<<"$line" && drop=1
        fi
        ((drop)) || printf '%s\n' "$line"
    done <"$1"
}

# compare A B WHAT: prints the differences not excused; fails if any, and
# if a snapshot is missing or empty or diff itself fails: two missing
# files have no differences, and would pass for identical.
excused_total=0
compare() {
    local raw left f rc=0
    for f in "$1" "$2"; do
        if [[ ! -s $f ]]; then
            echo "--- $3: no snapshot $f to compare"
            return 1
        fi
    done
    raw=$(diff "$1" "$2") || rc=$?
    if ((rc > 1)); then
        echo "--- $3: diff failed (status $rc)"
        return 1
    fi
    raw=$(printf '%s\n' "$raw" | grep '^[<>]' || true)
    left=$raw
    if [[ -n $raw ]] && ! grep -q '^\^\$never\^$' "$ignored_sections"; then
        rc=0
        left=$(diff <(without_ignored_sections "$1") <(without_ignored_sections "$2")) || rc=$?
        if ((rc > 1)); then
            echo "--- $3: diff failed (status $rc)"
            return 1
        fi
        left=$(printf '%s\n' "$left" | grep '^[<>]' || true)
    fi
    left=$(printf '%s\n' "$left" | grep -v -E -f "$ignores" | grep . || true)
    excused_total=$((excused_total + $(printf '%s' "$raw" | grep -c . || true) -
        $(printf '%s' "$left" | grep -c . || true)))
    if [[ -n $left ]]; then
        echo "--- $3: upstream (<) and ours (>) differ:"
        printf '%s\n' "$left"
        return 1
    fi
}

# run_cleanup WHO WHOSE: WHO's --cleanup (ours or upstream) on WHOSE state.
run_cleanup() {
    local binary=$ours
    [[ $1 == upstream ]] && binary=$upstream
    doing "$1 --cleanup on $2's state"
    if ! "$binary" --cleanup --config "$config" >"$dir/cleanup.log" 2>&1; then
        echo "$1 --cleanup failed on $2's state:"
        tail -n 20 "$dir/cleanup.log"
        return 1
    fi
}

# finish WHO: cleanup, the scenario's teardown, the kernel checked clean.
finish() {
    local ok=0 cleaner=${CONFORMANCE_CLEANUP_OURS:-ours}
    [[ $1 == upstream ]] && cleaner=${CONFORMANCE_CLEANUP_UPSTREAM:-ours}
    run_cleanup "$cleaner" "$1" || ok=1
    bash "$spec/teardown.sh" >>"$dir/setup.log" 2>&1 || {
        echo "the scenario's teardown failed:"
        tail -n 5 "$dir/setup.log"
        ok=1
    }
    check_clean "$cleaner --cleanup after $1" || ok=1
    return $ok
}

kills=()
# pass LABEL: the proxy from a clean kernel through every step, a
# snapshot after each into $dir/LABEL-STEP.txt; the global state after it
# into $dir/LABEL-globals.txt. Fails at the first step that fails.
pass() {
    proxy_label=$1
    local problems=0
    if ! reset_globals >"$work/reset.out" 2>&1; then
        echo "resetting the kernel-global state to the boot values before $proxy_label failed:"
        cat "$work/reset.out"
        return 1
    fi
    if ! bash "$spec/setup.sh" >>"$dir/setup.log" 2>&1; then
        echo "the scenario's setup failed:"
        tail -n 5 "$dir/setup.log"
        return 1
    fi
    # A scenario without steps keeps its objects for both proxies (their
    # cluster IPs may be the API server's pick); one with steps starts
    # again from a fresh namespace.
    if ((applied == 0 || steps > 0)); then
        if ! request "step $run 0"; then
            echo "applying the initial objects failed"
            return 1
        fi
        services[0]=${answer#services=}
        applied=1
    fi
    start_proxy
    local t0=$SECONDS
    if ! wait_synced 0 "$dir/$proxy_label-0.txt"; then
        stop_proxy || true
        finish "$proxy_label" || true
        return 1
    fi
    log "$run: $proxy_label synced its start in $((SECONDS - t0))s"
    check_programmed 0 || problems=1
    local i restart restart_upstream kill node name
    while IFS=$'\t' read -r i restart restart_upstream kill node name; do
        [[ -n $i ]] || continue
        [[ $proxy_label == upstream ]] && restart=$restart_upstream
        if [[ $restart != - ]]; then
            log "$run: $proxy_label stopped with SIG${restart^^} before step $i"
            stop_proxy "${restart^^}" || { problems=1; break; }
        fi
        local asked=$(now_ms) frozen=
        # Upstream rebuilds everything at each sync, so its state after a
        # step does not depend on how the step's events trickle in: it is
        # paused while the host applies the step, and takes it in at once
        # (one sync of ~10 s in the guest instead of two). Ours is not: its
        # incremental path is what the trickle exercises.
        if [[ $proxy_label == upstream && -n $proxy_pid && ${CONFORMANCE_FREEZE_UPSTREAM:-1} == 1 ]]; then
            kill -STOP "$proxy_pid" && frozen=$proxy_pid
        fi
        if [[ $proxy_label == ours && $kill != - ]]; then
            kill_during_step "$i" "$kill" || { problems=1; break; }
        elif [[ $proxy_label == split && $kill != - ]]; then
            kill_api_side_during_step "$i" "${kill#s}" || { problems=1; break; }
        elif ! request "step $run $i"; then
            echo "step $i ($name): applying it failed"
            [[ -z $frozen ]] || kill -CONT "$frozen"
            problems=1
            break
        fi
        [[ -z $frozen ]] || kill -CONT "$frozen"
        applied_ms=$(($(now_ms) - asked))
        services[i]=${answer#services=}
        if [[ -z $proxy_pid ]]; then
            start_proxy
        fi
        if ! wait_synced "$i" "$dir/$proxy_label-$i.txt" "$node"; then
            echo "step $i: $name"
            problems=1
            break
        fi
        log "$run: $proxy_label step $i: applied in ${applied_ms}ms, $wait_out"
        check_programmed "$i" || problems=1
    done <"$steps_file"
    ((steps == 0)) || log "$run: $proxy_label went through $steps steps in $((SECONDS - t0))s"
    stop_proxy || problems=1
    stop_api_side || problems=1
    if ! globals >"$dir/$proxy_label-globals.txt"; then
        echo "reading the kernel-global state after $proxy_label failed:"
        grep failed "$dir/$proxy_label-globals.txt"
        problems=1
    fi
    t0=$SECONDS
    finish "$proxy_label" || problems=1
    log "$run: $proxy_label cleaned up in $((SECONDS - t0))s"
    return $problems
}

# check_programmed STEP: the step's snapshot has what its Services make a
# proxy program, in every section (tool: `conformance check`): two
# snapshots that lack a section alike compare equal.
check_programmed() {
    local lacks
    if ! lacks=$("$bin/conformance" check "$dir/$proxy_label-$1.txt" \
        --services "${services[$1]:-0}" --families "$families"); then
        echo "$proxy_label: step $1 has ${services[$1]:-0} Services, but its snapshot lacks: $lacks"
        return 1
    fi
}

# What ours was doing when it died, from the end of its debug log: the
# runner, the proxier and the reporter log each sync's start, each
# facility's writes and its end.
sync_stage() {
    awk '
        /^--- started/ { stage = "starting up" }
        /sync starting/ { stage = "in a sync, planning" }
        /ipvs operations applied/ { stage = "in a sync, IPVS written" }
        /address operations applied/ { stage = "in a sync, addresses written" }
        /ipset operations applied/ { stage = "in a sync, ipsets written" }
        /(sync|full reconcile) applied/ { stage = "in a sync, at iptables" }
        /sync done/ { stage = "between syncs" }
        END { print stage }' "$dir/ours.log"
}

# kill_during_step STEP MS: the step's request goes to the host, and MS
# later, whatever the host and ours are doing then, ours is killed with
# SIGKILL and started again. Which of the step's states the kernel was in
# (the previous step's, this one's, or neither) and what ours' log says it
# was doing are the stage of the kill; once the step is applied, the
# kernel must converge to upstream's snapshot of it.
kill_during_step() {
    local i=$1 ms=$2 at kernel process restarted requester applied now
    if [[ ! -f $dir/upstream-$i.txt || ! -f $dir/ours-$((i - 1)).txt ]]; then
        echo "no snapshot of upstream's step $i to converge to"
        return 1
    fi
    local watcher= seen=$work/sync-seen
    if [[ $ms == s* ]]; then
        # Aimed at ours' first sync of the step: its start is in the log.
        ms=${ms#s}
        rm -f "$seen"
        # Marked as grep matches: after the pipeline, under pipefail, it
        # would take tail's status, whom the next line kills with SIGPIPE.
        (timeout "$sync_timeout" tail -n0 -f "$dir/ours.log" |
            { grep -q -m1 'sync starting' && : >"$seen"; } || true) &
        watcher=$!
        sleep 0.3
    fi
    rm -f "$work/step.answer"
    (
        if request "step $run $i" >"$work/step.log" 2>&1; then
            echo "ok $answer"
        else
            echo error
        fi >"$work/step.answer"
    ) &
    requester=$!
    if [[ -n $watcher ]]; then
        doing "step $i: waiting for ours to start its sync (watcher $watcher, requester $requester)"
        # Polled with a builtin: a process per poll would be late.
        until [[ -e $seen ]] || ! running "$watcher"; do
            read -r -t 0.002 -u 9 || true
        done
        [[ -e $seen ]] ||
            log "$run: ours started no sync within ${sync_timeout}s of step $i's request; killed now"
    fi
    # No sleep process either: starting one takes ~0.1 s in the guest.
    ((ms == 0)) || read -r -t "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))" -u 9 || true
    stop_proxy KILL || return 1
    process=$(sync_stage)
    doing "step $i: the kernel's state at the SIGKILL"
    at=$(snapshot)
    start_proxy
    restarted=$(now_ms)
    doing "step $i: waiting for the host to apply it (requester $requester)"
    wait "$requester" || true
    applied=$(now_ms)
    answer=$(<"$work/step.answer")
    if [[ $answer != ok* ]]; then
        echo "step $i: applying it failed:"
        cat "$work/step.log"
        return 1
    fi
    answer=${answer#ok }
    if [[ $at == "$(<"$dir/upstream-$i.txt")" ]]; then
        kernel="the step's state"
    elif [[ $at == "$(<"$dir/ours-$((i - 1)).txt")" ]]; then
        kernel="the previous step's state"
    else
        kernel="a state between the two"
    fi
    local deadline=$((SECONDS + sync_timeout))
    doing "step $i: waiting for ours to converge after the SIGKILL"
    while :; do
        now=$(snapshot)
        [[ $now == "$(<"$dir/upstream-$i.txt")" ]] && break
        if ! running "$proxy_pid"; then
            proxy_died
            return 1
        fi
        if ((SECONDS >= deadline)); then
            echo "ours did not converge to upstream's step $i within ${sync_timeout}s of its restart after a SIGKILL ($process, kernel in $kernel):"
            printf '%s\n' "$now" >"$work/now.txt"
            compare "$dir/upstream-$i.txt" "$work/now.txt" "step $i after the kill" || true
            return 1
        fi
        sleep 0.2
    done
    local took=$(($(now_ms) - (applied > restarted ? applied : restarted)))
    kills+=("$i|$ms|$process|$kernel|$took")
    log "$run: SIGKILL ${ms}ms into step $i, $process, kernel in $kernel; converged ${took}ms after the restart and the step"
}

# kill_api_side_during_step STEP MS: the step's request goes to the host,
# and MS later the split's API side is killed with SIGKILL and started
# again at once; the node proxy lives on and is waited for as after any
# step.
api_kills=0
kill_api_side_during_step() {
    local i=$1 ms=$2 requester
    rm -f "$work/step.answer"
    (
        if request "step $run $i" >"$work/step.log" 2>&1; then
            echo "ok $answer"
        else
            echo error
        fi >"$work/step.answer"
    ) &
    requester=$!
    ((ms == 0)) || read -r -t "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))" -u 9 || true
    stop_api_side KILL || return 1
    start_api_side
    api_kills=$((api_kills + 1))
    log "$run: the API side killed ${ms}ms into step $i and started again"
    doing "step $i: waiting for the host to apply it (requester $requester)"
    wait "$requester" || true
    answer=$(<"$work/step.answer")
    if [[ $answer != ok* ]]; then
        echo "step $i: applying it failed:"
        cat "$work/step.log"
        return 1
    fi
    answer=${answer#ok }
}

# compare_passes LABEL...: each pass that ran (ours, the split) against
# upstream, every step's snapshots and the global state; prints the steps
# that differ. A step without both snapshots counts as differing: it was
# not compared.
compare_passes() {
    local i name bad=0
    local -a names=("the initial objects")
    while IFS=$'\t' read -r i _ _ _ _ name; do
        [[ -n $i ]] && names[i]=$name
    done <"$steps_file"
    if [[ -n ${CONFORMANCE_VERBOSE:-} ]]; then
        for ((i = 0; i <= steps; i++)); do
            [[ -f $dir/upstream-$i.txt ]] || continue
            echo "--- $run step $i: upstream's snapshot"
            cat "$dir/upstream-$i.txt"
            ((i > 0)) || cat "$dir/upstream-globals.txt"
        done
    fi
    # Ours, and ours fed by the split when it ran: each against upstream.
    local label what
    for label in "$@"; do
        what=
        [[ $label == split ]] && what="the split's "
        for ((i = 0; i <= steps; i++)); do
            if ! compare "$dir/upstream-$i.txt" "$dir/$label-$i.txt" "$run ${what}step $i (${names[i]})"; then
                bad=$((bad + 1))
                differing+=("${what}step $i (${names[i]})")
            fi
        done
        if ! compare "$dir/upstream-globals.txt" "$dir/$label-globals.txt" "$run ${what}kernel-global state"; then
            bad=$((bad + 1))
            differing+=("${what}kernel-global state")
        fi
    done
    return $((bad > 0))
}

# One run of a scenario or walk; prints its result line last.
scenario() {
    local problems=() differing=() services=()
    excused_total=0
    applied=0
    kills=()
    steps_file=$spec/steps.tsv
    steps=$(grep -c . "$steps_file" || true)
    if ! pass upstream; then
        problems+=("upstream's pass failed")
    fi
    if ! pass ours; then
        problems+=("our pass failed")
    fi
    api_kills=0
    if ((split)) && ! pass split; then
        problems+=("the split's pass failed")
    fi
    request "delete $run" || problems+=("deleting its objects failed")
    local passes=(ours)
    ((split)) && passes+=(split)
    compare_passes "${passes[@]}" || problems+=("${#differing[@]} steps differ: ${differing[*]}")
    if [[ -n ${CONFORMANCE_VERBOSE:-} ]]; then
        echo "--- $run: upstream's log"
        cat "$dir/upstream.log"
        echo "--- $run: our log"
        cat "$dir/ours.log"
        if ((split)); then
            echo "--- $run: the split's node log"
            cat "$dir/split.log"
            echo "--- $run: the split's API side log"
            cat "$dir/api-side.log"
        fi
    fi
    if ((${#kills[@]})); then
        report_kills
    fi
    local lines
    lines=$(grep -vc '^##' "$dir/upstream-0.txt" 2>/dev/null || true)
    local by=
    ((excused_total == 0)) || by=$(excused_by "$run")
    if ((${#problems[@]} == 0)); then
        printf 'RESULT %-40s identical%s (%s steps, %s lines at the start, %s excused%s%s%s)\n' \
            "$run" "$( ((split)) && echo ", the split too")" "$steps" "${lines:-0}" "$excused_total" \
            "${by:+ at $release_minor: $by}" \
            "$( ((${#kills[@]})) && echo ", ${#kills[@]} SIGKILLs converged")" \
            "$( ((api_kills)) && echo ", $api_kills API-side SIGKILLs caught up")"
    else
        local IFS=';'
        printf 'RESULT %-40s DIFFERENT: %s\n' "$run" "${problems[*]}"
        case $run in
        random-* | kill-*)
            if [[ $run == kill-* ]]; then
                echo "    replay: make conformance-random SEED=${run#*-} KILLS=1 KILL_STEPS=$steps"
            else
                echo "    replay: make conformance-random SEED=${run#*-} STEPS=$steps"
            fi
            echo "    the walk: $CONFORMANCE_WORK/$run.yaml"
            ;;
        esac
        return 1
    fi
}

report_kills() {
    local k i ms process kernel took stage
    local -A by_stage=()
    local times=()
    echo "--- $run: ${#kills[@]} SIGKILLs of ours"
    for k in "${kills[@]}"; do
        IFS='|' read -r i ms process kernel took <<<"$k"
        printf 'KILL %s step %s, %sms into it, %s, kernel in %s: converged in %sms\n' \
            "$run" "$i" "$ms" "$process" "$kernel" "$took"
        by_stage["$process, kernel in $kernel"]=$((${by_stage["$process, kernel in $kernel"]:-0} + 1))
        times+=("$took")
    done
    for stage in "${!by_stage[@]}"; do
        echo "KILLS $run: ${by_stage[$stage]} $stage"
    done
    printf '%s\n' "${times[@]}" | sort -n | awk -v run="$run" '
        { t[NR] = $1 } END { printf "KILLS %s: convergence min %dms, median %dms, max %dms\n",
                                    run, t[1], t[int((NR + 1) / 2)], t[NR] }'
}

# takeover: each proxy's clean-start snapshot, then upstream → ours →
# upstream over live state with traffic through the Traffic target.
takeover() {
    local problems=() differing=() services=()
    excused_total=0
    applied=0
    # The handover is of the initial objects; steps are not run.
    steps=0
    steps_file=/dev/null
    # shellcheck disable=SC1091
    source "$spec/traffic.env"
    # The pods first: their links are local addresses, where NodePorts
    # are served, so every snapshot must be taken with them there.
    local stop=$work/traffic-stop ready=$work/traffic-ready go=$work/traffic-go
    local done=$work/traffic-done pods=() n=0 addr t
    rm -f "$stop" "$ready" "$go" "$done"
    for addr in $traffic_pods; do
        pods+=(--pod "pod-$n=$addr")
        n=$((n + 1))
    done
    "$bin/traffic" --connect "$traffic_target" "${pods[@]}" --stop-file "$stop" \
        --ready-file "$ready" --start-file "$go" --done-file "$done" \
        >"$dir/traffic.out" 2>&1 &
    local traffic=$!
    for t in $(seq 100); do
        [[ -f $ready ]] && break
        sleep 0.2
    done
    [[ -f $ready ]] || problems+=("the pods did not start: $(cat "$dir/traffic.out")")

    pass ours || problems+=("our clean start failed")
    pass upstream || problems+=("upstream's clean start failed")
    compare_passes ours || problems+=("the clean starts differ")

    if ! reset_globals >"$work/reset.out" 2>&1; then
        cat "$work/reset.out"
        problems+=("resetting the kernel-global state failed")
    fi
    bash "$spec/setup.sh" >>"$dir/setup.log" 2>&1 || problems+=("setup failed")
    proxy_label=upstream
    start_proxy
    wait_synced 0 "$dir/takeover-upstream.txt" || problems+=("upstream did not sync")
    touch "$go"
    sleep 3
    log "$run: upstream stopped, ours starts over its state"
    stop_proxy || problems+=("upstream outlived SIGKILL")
    proxy_label=ours
    start_proxy
    wait_synced 0 "$dir/takeover-ours.txt" || problems+=("ours did not sync over upstream's state")
    compare "$dir/ours-0.txt" "$dir/takeover-ours.txt" "$run: ours after the takeover (<: from a clean start)" ||
        problems+=("ours after the takeover differs from ours from a clean start")
    sleep 3
    log "$run: ours stopped, upstream starts over its state (the rollback)"
    stop_proxy || problems+=("ours outlived SIGKILL")
    proxy_label=upstream
    start_proxy
    wait_synced 0 "$dir/rollback-upstream.txt" || problems+=("upstream did not sync over our state")
    compare "$dir/upstream-0.txt" "$dir/rollback-upstream.txt" "$run: upstream after the rollback (<: from a clean start)" ||
        problems+=("upstream after the rollback differs from upstream from a clean start")
    sleep 3
    touch "$stop"
    stop_proxy || problems+=("upstream outlived SIGKILL")
    finish upstream || problems+=("cleaning up failed")
    touch "$done"
    wait "$traffic" || problems+=("the traffic client failed")
    request "delete $run" || problems+=("deleting its objects failed")
    cat "$dir/traffic.out"
    local sent failed
    read -r _ sent _ _ _ failed _ <"$dir/traffic.out" || true
    if [[ ! $sent =~ ^[0-9]+$ ]] || ((sent < 50)); then
        problems+=("too little traffic: ${sent:-none} requests")
    elif ((failed > 0)); then
        problems+=("$failed of $sent requests failed")
    fi
    if ((${#problems[@]} == 0)); then
        printf 'RESULT %-40s identical, takeover and rollback with %s requests, 0 failed\n' "$run" "$sent"
    else
        local IFS=';'
        printf 'RESULT %-40s DIFFERENT: %s\n' "$run" "${problems[*]}"
        return 1
    fi
}

read -r -a runs <<<"$CONFORMANCE_RUNS"
modprobe -q ip_vs 2>/dev/null || true
force_clean
empty=$(snapshot)
collect_sysctl_files
declare -A boot_sysctls=()
for f in "${sysctl_files[@]}"; do
    read -r boot_sysctls[$f] <"$f" || true
done
read -r _ _ _ _ tcp tcpfin udp <<<"$(ipvsadm -L --timeout)"
boot_timeouts="$tcp $tcpfin $udp"
log "boot state: IPVS timeouts $boot_timeouts, ${#sysctl_files[@]} sysctls"
results=$work/results
: >"$results"
main_pid=$$
watchdog &
watchdog_pid=$!
trap 'kill "$watchdog_pid" 2>/dev/null || true' EXIT
failed=0
not_run=0
start=$SECONDS
done_runs=0
for run in "${runs[@]}"; do
    t0=$SECONDS
    spec=$CONFORMANCE_WORK/$run
    # A scenario that turns the node's IPv6 off syncs IPv4 only.
    families=$all_families
    [[ ! -f $spec/families ]] || read -r families <"$spec/families"
    dir=$work/$run
    config=$spec/config.yaml
    rm -rf "$dir"
    mkdir -p "$dir"
    log "$run"
    reason=$(excuse skip "$run" | head -n 1)
    if [[ -n $reason ]]; then
        echo "RESULT $(printf '%-40s' "$run") not run at $release: $reason ($(excused_by "$run"))" |
            tee -a "$results"
        not_run=$((not_run + 1))
        done_runs=$((done_runs + 1))
        continue
    fi
    use_excuses "$run"
    what=scenario
    [[ $run == takeover-* ]] && what=takeover
    # Left of ||, "$what" runs with set -e off, and so do its functions:
    # every status that matters in there is checked by hand.
    ok=1
    outlived=0
    "$what" >"$work/$run.out" 2>&1 || ok=0
    # A process that outlived SIGKILL, in the run or at its end, would be
    # under every later run's proxy: those are not run.
    stop_proxy >>"$work/$run.out" 2>&1 || true
    stop_api_side >>"$work/$run.out" 2>&1 || true
    stuck=$outlived
    if ((stuck)); then
        echo "RESULT $run DIFFERENT: a process of it outlived SIGKILL; the runs after it not run" \
            >>"$work/$run.out"
        ok=0
    fi
    ((ok)) || failed=$((failed + 1))
    done_runs=$((done_runs + 1))
    cat "$work/$run.out"
    grep '^RESULT' "$work/$run.out" | sed "s/\$/ [$((SECONDS - t0))s]/" >>"$results" ||
        echo "RESULT $run ERROR (no result; see above)" >>"$results"
    grep '^KILLS' "$work/$run.out" >>"$results" || true
    ((stuck == 0)) || break
done
failed=$((failed + ${#runs[@]} - done_runs))
echo "=== conformance: ${#runs[@]} runs in $((SECONDS - start))s, $failed not identical$( ((not_run)) && echo ", $not_run not run at $release")"
cat "$results"
# Which kube-proxy every run above was held to, once.
echo "RESULT conformance upstream_version $release"
((failed == 0))
