#!/usr/bin/env bash
# Side by side with upstream kube-proxy (issue 7): for each scenario under
# scenarios/, in the real-kernel guest against the loopback control plane
# (tests/e2e/control-plane.sh, already started): apply the scenario's
# objects, run upstream kube-proxy (IPVS mode) on the scenario's
# configuration until it has synced, snapshot the kernel, clean up with our
# --cleanup and check the kernel is clean; then ours the same way, cleaned
# up with upstream's --cleanup; diff the two snapshots. Differences chosen
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
# E2E_K8S_DIR/bin/kube-proxy), CONFORMANCE_SYNC_TIMEOUT (60 seconds).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}

log() { printf '%s conformance: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

if [[ ${1:-} != --in-guest ]]; then
    eval "$("$repo/tests/e2e/control-plane.sh" env)"
    cargo build --bin kube-ipvs-proxy
    k8s_bin=$(dirname "$(command -v kubectl)")
    export E2E_KUBECTL=$k8s_bin/kubectl
    export E2E_UPSTREAM_PROXY=${E2E_UPSTREAM_PROXY:-$k8s_bin/kube-proxy}
    export CONFORMANCE_SCENARIOS="$*"
    # The node's zone, for the scenarios with topology hints.
    kubectl label node "$E2E_NODE_NAME" --overwrite \
        topology.kubernetes.io/zone=zone-a >/dev/null
    cd "$repo"
    VM_HOST_PORTS=$E2E_VM_HOST_PORTS VM_TIMEOUT=${VM_TIMEOUT:-3600} \
        VM_PASS_ENV="CARGO_TARGET_DIR E2E_KUBECTL E2E_UPSTREAM_PROXY \
E2E_ADMIN_GUEST_KUBECONFIG E2E_NODE_NAME CONFORMANCE_SCENARIOS \
CONFORMANCE_SYNC_TIMEOUT CONFORMANCE_VERBOSE" \
        exec tests/vm/run tests/conformance/run.sh --in-guest
fi

# In the guest.
ours=$target/debug/kube-ipvs-proxy
upstream=$E2E_UPSTREAM_PROXY
sync_timeout=${CONFORMANCE_SYNC_TIMEOUT:-60}
work=/tmp/conformance
mkdir -p "$work"
kubectl() {
    "$E2E_KUBECTL" --kubeconfig "$E2E_ADMIN_GUEST_KUBECONFIG" "$@"
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
    local set
    for set in $(ipset list -n | grep '^KUBE-' | LC_ALL=C sort); do
        ipset list "$set" | awk -v set="$set" '
            /^Type:/ { print set, $0 }
            /^Header:/ { sub(/ initval 0x[0-9a-f]+/, ""); print set, $0 }
            /^Members:/ { members = 1; next }
            members && NF { print set, "member", $0 }' | LC_ALL=C sort
    done
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

# The highest kubeproxy_sync_proxy_rules_last_timestamp_seconds, 0 if none.
last_sync() {
    curl -fsS --max-time 2 http://127.0.0.1:10249/metrics 2>/dev/null |
        awk '/^kubeproxy_sync_proxy_rules_last_timestamp_seconds/ {
                 if ($NF > max) max = $NF }
             END { printf "%d\n", max }'
}

# run_proxy LABEL OUT -- COMMAND...: runs the proxy until it has synced
# (its last-sync metric set, then the snapshot the same twice in a row a
# second apart), writes the snapshot to OUT, stops it. Fails if it never
# syncs or exits early.
run_proxy() {
    local label=$1 out=$2
    shift 3
    "$@" >"$work/$label.log" 2>&1 &
    local pid=$! deadline=$((SECONDS + sync_timeout))
    until (($(last_sync) > 0)); do
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
    local statuses=$work/statuses.json
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

# One scenario; prints its result line last.
scenario() {
    local name=$1 file=$here/scenarios/$1.yaml ns=conf-$1
    local dir=$work/$name
    rm -rf "$dir"
    mkdir -p "$dir"
    split "$file" "$dir/config.yaml" "$dir/objects.yaml"
    delete_namespace "$ns"
    step() { log "$name: $1 (${SECONDS}s)"; }
    apply_objects "$ns" "$dir/objects.yaml"
    step "objects applied"
    local problems=()
    if ! run_proxy upstream "$dir/upstream.txt" -- \
        "$upstream" --config "$dir/config.yaml"; then
        problems+=("upstream did not sync")
    fi
    step "upstream synced"
    if ! "$ours" --cleanup --config "$dir/config.yaml" \
        >"$dir/ours-cleanup.log" 2>&1; then
        problems+=("our --cleanup failed on upstream's state")
        tail -n 20 "$dir/ours-cleanup.log"
    fi
    check_clean "our --cleanup after upstream" ||
        problems+=("our --cleanup left upstream's state")
    if ! run_proxy ours "$dir/ours.txt" -- \
        "$ours" --config "$dir/config.yaml"; then
        problems+=("ours did not sync")
    fi
    step "ours synced"
    if ! "$upstream" --cleanup --config "$dir/config.yaml" \
        >"$dir/upstream-cleanup.log" 2>&1; then
        problems+=("upstream --cleanup failed on our state")
        tail -n 20 "$dir/upstream-cleanup.log"
    fi
    check_clean "upstream --cleanup after ours" ||
        problems+=("upstream --cleanup left our state")
    step "cleaned up"
    delete_namespace "$ns"
    step "namespace deleted"
    touch "$dir/upstream.txt" "$dir/ours.txt"
    if [[ -n ${CONFORMANCE_VERBOSE:-} ]]; then
        echo "--- $name: upstream's snapshot"
        cat "$dir/upstream.txt"
    fi
    local raw excused left
    raw=$(diff "$dir/upstream.txt" "$dir/ours.txt" | grep '^[<>]' || true)
    left=$(printf '%s\n' "$raw" | grep -v -E -f "$ignores" | grep . || true)
    excused=$(printf '%s\n' "$raw" | grep -c -E -f "$ignores" || true)
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
