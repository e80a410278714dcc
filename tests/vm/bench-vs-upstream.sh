#!/usr/bin/env bash
# Upstream kube-proxy (IPVS mode) against ours on the same objects, in the
# real-kernel guest, against the loopback control plane (what is
# measured: benches/vs_upstream/main.rs). For each size and each proxy:
# a fresh control plane, the objects created from the host, a fresh guest
# boot running the proxy and the measurements; then one table of both,
# printed and written as CSV and PNG under target/bench/.
#
#   BENCH_SIZES="1000 10000" tests/vm/bench-vs-upstream.sh
#
# Also BENCH_PROXIES ("upstream ours"), BENCH_KEEP_RESULTS, BENCH_REPS,
# BENCH_CHURN_RATE, BENCH_CHURN_SECONDS, BENCH_CHURN_SAMPLE, BENCH_TRASH_WARMUP,
# BENCH_CHANGE_TIMEOUT, BENCH_COLD_TIMEOUT (see the
# bench), BENCH_SYNC_PERIOD (both proxies' syncPeriod, 30s by default),
# BENCH_PERF (a perf profile of the churn, of the proxy or with
# BENCH_PERF=bench of the bench itself, or with BENCH_PERF=cold of the
# proxy's start and cold sync; with VM_KEEP=1 it stays in the
# kept results folder with the guest's kallsyms, for `perf report
# --kallsyms`; BENCH_PERF_CALL_GRAPH=dwarf for whole call stacks),
# BENCH_WRITER (`relay`, the default: the churn's
# writes are made on the host on the guest's schedule, on BENCH_RELAY_PORT,
# 6447; `guest`: from the guest itself, as the bench first did, which
# costs the guest about as much CPU as the proxy; benches/vs_upstream/
# relay.rs), BENCH_OURS_REV (ours built from that commit instead of the
# work tree: the "before" of a before/after pair, measured by this tree's
# bench and harness) and E2E_K8S_DIR (where build-k8s.sh keeps upstream's
# binaries).
# Each proxy's row also has the host's steal over its run (the host may be
# a VM whose hypervisor takes its CPUs; the guest cannot see that).
# Both proxies are optimised builds: ours from the bench profile, upstream's
# as build-k8s.sh builds it. The guest reads the time from the TSC, as a
# real node does (VM_APPEND; under TCG the kernel would otherwise fall
# back to the HPET, ~6 us a read, a few per cent of both proxies' CPU
# under churn). Its CPU model is QEMU's `max` (VM_CPU): under TCG the
# default, qemu64, has no AES-NI, so both proxies' TLS fell back to
# software AES where a node's CPU runs AES-NI, for both alike.
# Under TCG, 10,000 services take upstream several minutes per sync.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$VM_REPO"

sizes=${BENCH_SIZES:-1000 10000}
proxies=${BENCH_PROXIES:-upstream ours}
target=${CARGO_TARGET_DIR:-$VM_REPO/target}
out=$target/bench/vs-upstream
export E2E_K8S_DIR=${E2E_K8S_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kube-ipvs-proxy/k8s}
# shellcheck source=../kubernetes/release.sh
source "$VM_REPO/tests/kubernetes/release.sh"

"$VM_SRC/deps.sh" gnuplot-nox
tests/e2e/build-k8s.sh

exe=$(cargo bench --no-run --features guest-bench --bench vs_upstream \
    --message-format=json-render-diagnostics |
    jq -r 'select(.reason == "compiler-artifact"
                  and .target.name == "vs_upstream") | .executable // empty')
[[ -x $exe ]] || vm_die "building the vs_upstream bench gave no executable"
# Private copies: the target folder may be shared, and a build there
# during the run would swap a binary under it.
rm -rf "$out/bin" && mkdir -p "$out/bin"
cp "$exe" "$out/bin/vs_upstream"
cp "$(dirname "$(dirname "$exe")")/kube-ipvs-proxy" "$out/bin/kube-ipvs-proxy"
cp "$k8s_bin/kube-proxy" "$out/bin/kube-proxy"
bench=$out/bin/vs_upstream
# What the binaries just copied were built from: uncommitted changes
# make a run no longer that commit's.
commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- || commit+=-dirty
if [[ -n ${BENCH_OURS_REV:-} ]]; then
    # A worktree of that commit with a target folder of its own: cargo
    # hashes workspace members by their path inside the workspace, so a
    # shared folder lets each tree's build pass for the other's (its
    # outputs newer than the other tree's sources) and a later build of
    # this tree would then link the other commit's code. Its first build
    # is a whole one; the folder is kept for the next run of that commit.
    commit=$(git rev-parse --short "${BENCH_OURS_REV}^{commit}") ||
        vm_die "BENCH_OURS_REV: no commit '$BENCH_OURS_REV'"
    tree=$out/rev-$commit
    [[ -d $tree ]] || git worktree add --detach "$tree" "$commit" >&2
    (cd "$tree" && CARGO_TARGET_DIR=$tree/target cargo build --release \
        --bin kube-ipvs-proxy)
    cp "$tree/target/release/kube-ipvs-proxy" "$out/bin/kube-ipvs-proxy"
fi

# BENCH_KEEP_RESULTS=1 keeps the other sizes' and proxies' results of
# earlier runs, replacing only those run now. Each proxy and size's
# results carry a RUN line, the stamp of the run that measured them
# (the report prints it beside them), since kept ones may come from
# another commit, day or host.
results=$out/results.txt
[[ -n ${BENCH_KEEP_RESULTS:-} ]] || : >"$results"
touch "$results"
machine="upstream kube-proxy $("$out/bin/kube-proxy" --version 2>/dev/null | awk '{print $2}'),\
 guest kernel $(vm_kernel_release) under QEMU ${VM_ACCEL:-tcg}\
 on $(nproc) x $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
failed=()
relay_pid=
stop_relay() {
    [[ -n $relay_pid ]] || return 0
    kill "$relay_pid" 2>/dev/null || true
    wait "$relay_pid" 2>/dev/null || true
    relay_pid=
}
trap 'stop_relay; tests/e2e/control-plane.sh stop >/dev/null 2>&1 || true' EXIT
writer=${BENCH_WRITER:-relay}
relay_port=${BENCH_RELAY_PORT:-6447}
[[ $writer == relay || $writer == guest ]] ||
    vm_die "BENCH_WRITER is relay or guest, not '$writer'"

# /proc/stat's steal and all ticks, and the share stolen since a reading.
host_steal_ticks() {
    awk '/^cpu / { t = 0; for (i = 2; i <= 9; i++) t += $i; print $9, t; exit }' /proc/stat
}
host_steal_pct() {
    local s0 t0 s1 t1
    read -r s0 t0 <<<"$1"
    read -r s1 t1 <<<"$(host_steal_ticks)"
    awk -v s=$((s1 - s0)) -v t=$((t1 - t0)) \
        'BEGIN { printf "%.1f", (t > 0 ? 100 * s / t : 0) }'
}

for n in $sizes; do
    for proxy in $proxies; do
        vm_log "$proxy, $n services: a fresh control plane"
        tests/e2e/control-plane.sh stop >/dev/null 2>&1 || true
        tests/e2e/control-plane.sh start 2>"$out/control-plane.log" ||
            { cat "$out/control-plane.log" >&2; exit 1; }
        eval "$(tests/e2e/control-plane.sh env)"
        "$bench" populate "$n"
        # The API server's own answers at this size, before the guest
        # runs (benches/vs_upstream/api_alone.rs): what of the new
        # service's time is the API server's.
        api_alone=$("$bench" api-alone "$proxy" "$n")
        # The same configuration for both: upstream's defaults, the node,
        # the admin's kubeconfig through guestfwd.
        config=$out/config.yaml
        cat >"$config" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: ipvs
hostnameOverride: $E2E_NODE_NAME
clientConnection:
  kubeconfig: $E2E_ADMIN_GUEST_KUBECONFIG
conntrack:
  maxPerCore: 0
EOF
        # An experiment's syncPeriod (upstream's full sync, our repair
        # rounds); the default is upstream's 30 s.
        if [[ -n ${BENCH_SYNC_PERIOD:-} ]]; then
            printf 'ipvs:\n  syncPeriod: %s\n' "$BENCH_SYNC_PERIOD" >>"$config"
        fi
        binary=$out/bin/kube-ipvs-proxy
        [[ $proxy == upstream ]] && binary=$out/bin/kube-proxy
        vm_log "$proxy, $n services: measuring in the guest"
        rc=0
        # The host's own hypervisor's share, over this proxy's whole run:
        # the development host is a VM, and what its neighbours take
        # slows both proxies' every step, unseen by the guest.
        steal_before=$(host_steal_ticks)
        stamp="kube-ipvs-proxy $commit, $(date -u +%Y-%m-%dT%H:%MZ), $machine"
        host_ports=$E2E_VM_HOST_PORTS
        relay=
        if [[ $writer == relay ]]; then
            # The host's admin KUBECONFIG, from the control plane's env.
            "$bench" relay "$relay_port" 2>"$out/relay-$proxy-$n.log" &
            relay_pid=$!
            host_ports+=" $relay_port"
            relay=10.0.2.100:$relay_port
        fi
        # KUBECONFIG for the bench's own writes, from inside the guest.
        KUBECONFIG=$E2E_ADMIN_GUEST_KUBECONFIG BENCH_RELAY=$relay \
            VM_HOST_PORTS="$host_ports" \
            VM_MEM=${VM_MEM:-3072} VM_TIMEOUT=${VM_TIMEOUT:-7200} \
            VM_APPEND=${VM_APPEND-tsc=reliable clocksource=tsc} \
            VM_CPU=${VM_CPU:-max} \
            VM_PASS_ENV="${VM_PASS_ENV:-} KUBECONFIG BENCH_REPS BENCH_PERF \
BENCH_PERF_CALL_GRAPH BENCH_CHURN_RATE BENCH_CHURN_SECONDS BENCH_CHURN_SAMPLE BENCH_CHANGE_TIMEOUT \
BENCH_COLD_TIMEOUT BENCH_TRASH_WARMUP BENCH_RELAY" \
            "$VM_SRC/run" "$bench" measure "$proxy" "$n" "$binary" "$config" \
            2>&1 | tee "$out/$proxy-$n.log" || rc=$?
        stop_relay
        # The host's CPUs each minute, as the relay saw them.
        if [[ $writer == relay ]]; then
            tee -a "$out/$proxy-$n.log" <"$out/relay-$proxy-$n.log" >&2
        fi
        steal=$(host_steal_pct "$steal_before")
        vm_log "$proxy, $n services: the host's hypervisor took $steal % of its CPUs over the run (steal)"
        sed -i "/^RESULT $proxy $n /d; /^RUN $proxy $n /d" "$results"
        echo "RUN $proxy $n $stamp" >>"$results"
        grep '^RESULT ' "$out/$proxy-$n.log" >>"$results" || true
        echo "$api_alone" >>"$results"
        echo "RESULT $proxy $n host_steal_pct $steal" >>"$results"
        tests/e2e/control-plane.sh stop >/dev/null 2>&1 || true
        if ((rc != 0)); then
            # The other runs still count; the table shows what this one
            # measured before it failed.
            vm_log "$proxy, $n services failed (exit $rc); see $out/$proxy-$n.log"
            failed+=("$proxy/$n")
        fi
    done
done

# The runs' own stamps, not this invocation's: kept results were
# measured by earlier ones.
grep '^RUN ' "$results" >"$out/machine.txt" || true
"$bench" report "$results" "$out"
if ((${#failed[@]} > 0)); then
    vm_die "failed: ${failed[*]}"
fi
