#!/usr/bin/env bash
# Side by side with upstream kube-proxy (issue 7): for each scenario under
# scenarios/, in the real-kernel guest against the loopback control plane
# (tests/e2e/control-plane.sh, already started): apply the scenario's
# objects (from the host, on the guest's request), run upstream kube-proxy
# (IPVS mode) on the scenario's configuration until it has synced, snapshot
# the kernel, clean up with --cleanup and check the kernel is clean; then
# ours the same way; diff the two snapshots. Differences chosen
# on purpose are listed, with their reason and the lines they excuse, in
# differences.md; the diff ignores exactly those.
#
#   tests/conformance/run.sh [SCENARIO...]   names without .yaml; default all
#
# A scenario is one multi-document YAML file: one KubeProxyConfiguration
# document holding only what the scenario changes (the runner adds mode,
# hostnameOverride, the kubeconfig), then the objects, applied in a
# namespace of their own. An object's `status` (a Pod's IPs and readiness,
# a LoadBalancer's ingress) is applied through the status subresource; a
# Pod annotated `conformance/delete: "true"` is then deleted, and stays
# terminating (no kubelet confirms it). node-a is labelled with zone
# zone-a for topology hints.
#
# Prints, per scenario, "identical" or the differences, then a summary; the
# exit status is 1 if any scenario differs, failed to sync or left the
# kernel unclean. Environment: E2E_UPSTREAM_PROXY (the kube-proxy binary,
# E2E_K8S_DIR/bin/kube-proxy), CONFORMANCE_SYNC_TIMEOUT (60 seconds),
# CONFORMANCE_FAMILIES (the IP families both proxies must have synced, 2),
# CONFORMANCE_CLEANUP_UPSTREAM and CONFORMANCE_CLEANUP_OURS (whose
# --cleanup runs after upstream's and after our run: ours (default) or
# upstream), CONFORMANCE_VERBOSE (print upstream's snapshots),
# CONFORMANCE_PORT (the host's request port, the control port + 1). The
# report is also written to $TARGET/conformance/report.txt.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}

log() { printf '%s conformance: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

# The host's side, where kubectl is fast: scenarios become files and
# objects there, on the guest's request.
hostwork=$target/conformance
# split SCENARIO CONFIG OBJECTS: the configuration document (its body
# after the runner's base) and the other documents.
split() {
    cat >"$2" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: ipvs
hostnameOverride: $E2E_NODE_NAME
clientConnection:
  kubeconfig: $E2E_ADMIN_GUEST_KUBECONFIG
conntrack:
  maxPerCore: 0
EOF
    awk -v config="$2" -v objects="$3" '
        function flush() {
            if (doc ~ /(^|\n)kind: *KubeProxyConfiguration/) {
                n = split(doc, lines, "\n")
                for (i = 1; i <= n; i++)
                    if (lines[i] !~ /^(apiVersion|kind):/ && lines[i] != "")
                        print lines[i] >> config
            } else if (doc ~ /[^ \n]/) {
                print "---\n" doc > objects
            }
            doc = ""
        }
        /^---/ { flush(); next }
        { doc = doc $0 "\n" }
        END { flush() }' "$1"
    touch "$3"
}

# apply NS OBJECTS: the objects, their statuses, the deletions.
apply_objects() {
    local ns=$1 objects=$2
    kubectl create namespace "$ns" >/dev/null
    if grep -q '^kind: *Pod' "$objects"; then
        local i
        for i in $(seq 120); do
            kubectl -n "$ns" get serviceaccount default >/dev/null 2>&1 && break
            sleep 0.5
        done
    fi
    kubectl -n "$ns" apply -f "$objects" >/dev/null
    local statuses=$hostwork/statuses.json
    kubectl -n "$ns" create --dry-run=client -o json -f "$objects" |
        jq -s 'map(if .kind == "List" then .items[] else . end)
            | {apiVersion: "v1", kind: "List",
               items: map(select(.status != null and .status != {}))}' \
            >"$statuses"
    if (($(jq '.items | length' "$statuses") > 0)); then
        kubectl -n "$ns" apply --server-side --subresource=status \
            --force-conflicts -f "$statuses" >/dev/null
    fi
    local pod
    for pod in $(kubectl -n "$ns" get pods -o json |
        jq -r '.items[] | select(.metadata.annotations["conformance/delete"] == "true") | .metadata.name'); do
        kubectl -n "$ns" delete pod "$pod" --wait=false >/dev/null
    done
    # The controller's slices for Services with a selector.
    local svc deadline=$((SECONDS + 30))
    for svc in $(kubectl -n "$ns" get services -o json |
        jq -r '.items[] | select(.spec.selector != null) | .metadata.name'); do
        until [[ -n $(kubectl -n "$ns" get endpointslices \
            -l "kubernetes.io/service-name=$svc" -o name) ]]; do
            ((SECONDS < deadline)) || break
            sleep 0.5
        done
    done
    # The controller writes a Pod's status changes within a moment.
    sleep 2
}

delete_namespace() {
    kubectl -n "$1" delete pods --all --grace-period=0 --force \
        >/dev/null 2>&1 || true
    kubectl delete namespace "$1" --ignore-not-found --wait=true >/dev/null
}


# The guest's requests (request), one line each on the request port:
# "apply NAME" splits scenarios/NAME.yaml into hostwork/NAME/{config,
# objects}.yaml (the guest reads the configuration there) and applies the
# objects in namespace conf-NAME; "delete NAME" deletes that namespace.
# Answers "ok" or "error", then the log.
host_request() {
    local request verb name
    IFS= read -r request || exit 0
    read -r verb name <<<"${request%$'\r'}"
    local dir=$hostwork/$name out=$hostwork/request.out
    if [[ ! $name =~ ^[a-z0-9-]+$ || ! -f $here/scenarios/$name.yaml ]]; then
        echo "error: no scenario '$name'"
        return
    fi
    if case $verb in
        apply)
            {
                rm -rf "$dir" && mkdir -p "$dir" &&
                    split "$here/scenarios/$name.yaml" "$dir/config.yaml" \
                        "$dir/objects.yaml" &&
                    delete_namespace "conf-$name" &&
                    apply_objects "conf-$name" "$dir/objects.yaml"
            } >"$out" 2>&1
            ;;
        delete) delete_namespace "conf-$name" >"$out" 2>&1 ;;
        *) echo "unknown request '$verb' (apply, delete)" >"$out" && false ;;
        esac then
        echo ok
    else
        echo error
    fi
    cat "$out"
}

case ${1:-} in
--request)
    host_request
    exit
    ;;
--in-guest) ;;
*)
    eval "$("$repo/tests/e2e/control-plane.sh" env)"
    cargo build --bin kube-ipvs-proxy
    # A copy: the target folder may be shared, and a build there during
    # the run would swap the binary under it.
    mkdir -p "$hostwork"
    cp "$target/debug/kube-ipvs-proxy" "$hostwork/kube-ipvs-proxy"
    k8s_bin=$(dirname "$(command -v kubectl)")
    export E2E_UPSTREAM_PROXY=${E2E_UPSTREAM_PROXY:-$k8s_bin/kube-proxy}
    export CONFORMANCE_SCENARIOS="$*"
    export CONFORMANCE_WORK=$hostwork
    # The control port's neighbour: free while control-plane.sh runs.
    export CONFORMANCE_PORT=${CONFORMANCE_PORT:-$((${E2E_VM_HOST_PORTS##* } + 1))}
    mkdir -p "$hostwork"
    # The node's zone, for the scenarios with topology hints.
    kubectl label node "$E2E_NODE_NAME" --overwrite \
        topology.kubernetes.io/zone=zone-a >/dev/null
    socat -t 120 "TCP-LISTEN:$CONFORMANCE_PORT,bind=127.0.0.1,reuseaddr,fork" \
        "EXEC:$here/run.sh --request" </dev/null &
    server=$!
    trap 'kill $server 2>/dev/null || true' EXIT
    cd "$repo"
    rc=0
    VM_HOST_PORTS="$E2E_VM_HOST_PORTS $CONFORMANCE_PORT" \
        VM_TIMEOUT=${VM_TIMEOUT:-3600} \
        VM_PASS_ENV="CARGO_TARGET_DIR E2E_UPSTREAM_PROXY E2E_NODE_NAME \
CONFORMANCE_SCENARIOS CONFORMANCE_SYNC_TIMEOUT CONFORMANCE_FAMILIES \
CONFORMANCE_VERBOSE \
CONFORMANCE_PORT CONFORMANCE_WORK CONFORMANCE_CLEANUP_UPSTREAM \
CONFORMANCE_CLEANUP_OURS" \
        tests/vm/run tests/conformance/run.sh --in-guest |
        tee "$hostwork/report.txt" || rc=$?
    exit "$rc"
    ;;
esac

# In the guest.
ours=$CONFORMANCE_WORK/kube-ipvs-proxy
upstream=$E2E_UPSTREAM_PROXY
sync_timeout=${CONFORMANCE_SYNC_TIMEOUT:-60}
work=/tmp/conformance
mkdir -p "$work"

# A request to the host's side (host_request): kubectl is many times
# faster there than in the emulated guest.
request() {
    local answer
    exec 3<>"/dev/tcp/10.0.2.100/$CONFORMANCE_PORT"
    echo "$1" >&3
    answer=$(cat <&3)
    exec 3<&-
    [[ $answer == ok* ]] && return 0
    printf '%s\n' "$answer"
    return 1
}

# The kernel state a proxy owns, normalised: IPVS services and their
# destinations sorted, kube-ipvs0's addresses, each KUBE-* ipset's header
# (without its random initval) and sorted members, the KUBE-* chains of
# nat and filter per family with their rules in order (chains sorted by
# name, counters dropped) and the jumps to them from the built-in chains.
snapshot() {
    echo "## ipvs"
    ipvsadm -Sn | LC_ALL=C sort
    echo "## kube-ipvs0"
    if ip link show kube-ipvs0 >/dev/null 2>&1; then
        echo "link kube-ipvs0"
        ip -o addr show dev kube-ipvs0 | awk '{print $3, $4}' | LC_ALL=C sort
    fi
    echo "## ipsets"
    ipset list | awk '
        /^Name:/ { set = $2; members = 0; next }
        set !~ /^KUBE-/ { next }
        /^Type:/ { print set, $0 }
        /^Header:/ { sub(/ initval 0x[0-9a-f]+/, ""); print set, $0 }
        /^Members:/ { members = 1; next }
        members && NF { print set, "member", $0 }' | LC_ALL=C sort
    local save table
    for save in iptables-save ip6tables-save; do
        for table in nat filter; do
            echo "## $save -t $table"
            "$save" -t "$table" 2>/dev/null | awk '
                /^:KUBE-/ { print $1, "decl"; next }
                /^-A KUBE-/ { print $2, NR, $0; next }
                /^-A / && / -j KUBE-/ { print $2, NR, $0 }' |
                LC_ALL=C sort -k1,1 -k2,2n | awk '{
                    if ($2 == "decl") { print $1; next }
                    $1 = ""; $2 = ""; sub(/^  /, ""); print }'
        done
    done
}

# The snapshot of a kernel with nothing of a proxy's in it.
empty=$(snapshot)

force_clean() {
    local t save restore
    for save in iptables ip6tables; do
        for t in nat filter mangle; do
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

# How many IP families have synced: the series of
# kubeproxy_sync_proxy_rules_last_timestamp_seconds (one per ip_family),
# 0 while any of them has not. Both proxies run both families on this
# dual-stack kernel, and upstream's two proxiers sync independently: an
# IPv4 sync alone once let a snapshot miss upstream's whole IPv6 state.
synced_families() {
    curl -fsS --max-time 2 http://127.0.0.1:10249/metrics 2>/dev/null |
        awk '/^kubeproxy_sync_proxy_rules_last_timestamp_seconds/ {
                 n++; if ($NF > 0) synced++ }
             END { print (n == synced ? synced + 0 : 0) }'
}
families=${CONFORMANCE_FAMILIES:-2}

# run_proxy LABEL OUT -- COMMAND...: runs the proxy until it has synced
# (its last-sync metric set for every family, then the snapshot the same
# twice in a row a second apart), writes the snapshot to OUT, stops it. Fails if it never
# syncs or exits early.
run_proxy() {
    local label=$1 out=$2
    shift 3
    "$@" >"$work/$label.log" 2>&1 &
    local pid=$! deadline=$((SECONDS + sync_timeout))
    until (($(synced_families) >= families)); do
        if ! kill -0 "$pid" 2>/dev/null || ((SECONDS >= deadline)); then
            kill "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
            echo "$label did not sync; the end of its log:"
            tail -n 20 "$work/$label.log"
            return 1
        fi
        sleep 0.5
    done
    local prev now
    prev=$(snapshot)
    while :; do
        sleep 1
        now=$(snapshot)
        [[ $now == "$prev" ]] && break
        ((SECONDS < deadline)) || break
        prev=$now
    done
    printf '%s\n' "$now" >"$out"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
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

# The lines differences.md excuses: each `ignore:` line is an extended
# regular expression matched against one diff line ("< ..." upstream only,
# "> ..." ours only).
ignores=$work/ignores
sed -n 's/^ignore: *//p' "$here/differences.md" >"$ignores"

# cleanup WHO WHOSE: runs WHO's --cleanup (ours or upstream) on WHOSE
# state; fails if it fails or leaves anything of a proxy's behind.
cleanup() {
    local binary=$ours
    [[ $1 == upstream ]] && binary=$upstream
    if ! "$binary" --cleanup --config "$config" >"$dir/cleanup.log" 2>&1; then
        echo "$1 --cleanup failed on $2's state:"
        tail -n 20 "$dir/cleanup.log"
        check_clean "$1 --cleanup after $2" || true
        return 1
    fi
    check_clean "$1 --cleanup after $2"
}

# One scenario; prints its result line last.
scenario() {
    local name=$1
    local dir=$work/$name config=$CONFORMANCE_WORK/$name/config.yaml
    rm -rf "$dir"
    mkdir -p "$dir"
    step() { log "$name: $1 (${SECONDS}s)"; }
    if ! request "apply $name"; then
        echo "RESULT $name ERROR: applying its objects failed"
        return 1
    fi
    step "objects applied"
    local problems=()
    if ! run_proxy upstream "$dir/upstream.txt" -- \
        "$upstream" --config "$config"; then
        problems+=("upstream did not sync")
    fi
    step "upstream synced"
    cleanup "${CONFORMANCE_CLEANUP_UPSTREAM:-ours}" upstream ||
        problems+=("cleaning upstream's state up failed")
    if ! run_proxy ours "$dir/ours.txt" -- \
        "$ours" --config "$config"; then
        problems+=("ours did not sync")
    fi
    step "ours synced"
    cleanup "${CONFORMANCE_CLEANUP_OURS:-ours}" ours ||
        problems+=("cleaning our state up failed")
    step "cleaned up"
    request "delete $name" || problems+=("deleting its objects failed")
    step "namespace deleted"
    touch "$dir/upstream.txt" "$dir/ours.txt"
    if [[ -n ${CONFORMANCE_VERBOSE:-} ]]; then
        echo "--- $name: upstream's snapshot"
        cat "$dir/upstream.txt"
    fi
    local raw excused left
    raw=$(diff "$dir/upstream.txt" "$dir/ours.txt" | grep '^[<>]' || true)
    left=$(printf '%s\n' "$raw" | grep -v -E -f "$ignores" | grep . || true)
    # Not grep -c -f: with no pattern at all it prints nothing.
    excused=$(($(printf '%s' "$raw" | grep -c . || true) -
        $(printf '%s' "$left" | grep -c . || true)))
    if [[ -n $left ]]; then
        echo "--- $name: upstream (<) and ours (>) differ:"
        printf '%s\n' "$left"
        problems+=("$(printf '%s\n' "$left" | wc -l) differing lines")
    fi
    local lines
    lines=$(grep -vc '^##' "$dir/upstream.txt" || true)
    if ((${#problems[@]} == 0)); then
        printf 'RESULT %-40s identical (%s lines, %s excused)\n' \
            "$name" "$lines" "$excused"
    else
        local IFS=';'
        printf 'RESULT %-40s DIFFERENT: %s\n' "$name" "${problems[*]}"
        return 1
    fi
}

names=()
if [[ -n ${CONFORMANCE_SCENARIOS:-} ]]; then
    read -r -a names <<<"$CONFORMANCE_SCENARIOS"
else
    for f in "$here"/scenarios/*.yaml; do
        names+=("$(basename "$f" .yaml)")
    done
fi
modprobe -q ip_vs 2>/dev/null || true
force_clean
empty=$(snapshot)
results=$work/results
: >"$results"
failed=0
start=$SECONDS
for name in "${names[@]}"; do
    t0=$SECONDS
    if ! scenario "$name" >"$work/$name.out" 2>&1; then
        failed=$((failed + 1))
    fi
    cat "$work/$name.out"
    grep '^RESULT' "$work/$name.out" | sed "s/\$/ [$((SECONDS - t0))s]/" >>"$results" ||
        echo "RESULT $name ERROR (no result; see above)" >>"$results"
done
echo "=== conformance: ${#names[@]} scenarios in $((SECONDS - start))s, $failed not identical"
cat "$results"
((failed == 0))
