#!/usr/bin/env bash
# `make k8s-e2e`: Kubernetes' own [sig-network] e2e suite (e2e.test, built
# by build.sh from the control plane's k8s.io/kubernetes version) against
# one proxy on a fresh two-node cluster (cluster.sh).
#
#   tests/k8s-e2e/run.sh ours|upstream
#   tests/k8s-e2e/run.sh compare    the table of both proxies' runs so far
#
# The default focus and skip are upstream's kube-proxy IPVS job's
# (ci-kubernetes-kind-network-ipvs), limited to networking, plus the
# suite's own default skip of [Feature:...] tests and the skips listed in
# the documentation with their reasons. FOCUS and SKIP, when given (not
# empty), replace them entirely, so that any test can be run.
#
# K8S_E2E_SHARD=I/N runs only shard I of N of the selected tests (every
# Nth in name order): under TCG one proxy's whole selection takes longer
# than a session may run, and its shards, run one after another on fresh
# clusters, add up to the whole.
#
# K8S_E2E_PICK=REGEX (Python's, over each test's full name) runs only the
# selected tests it matches, split by K8S_E2E_SHARD when that is given
# too; its results count with the default selection's. K8S_E2E_PICK=releases
# picks the tests whose text or meaning differs between the supported
# releases (the headless, EndpointSlice, EndpointsController and DNS ones:
# docs/k8s-e2e.md) and CI's five (K8S_E2E_CI_FOCUS, from the Makefile).
#
# Writes $TARGET/k8s-e2e/K8S_VERSION/results/PROXY/RUN/ (one folder per
# Kubernetes release, tests/kubernetes/release.sh; RUN is `all`, `custom` for
# another FOCUS or SKIP, with -pick-NAME for a pick and -shard-I-of-N for a
# shard; replaced by a new run of the same): junit.xml, e2e.log and pods.txt
# (`kubectl get pods -A -o wide` before the suite); then, from every RUN
# of the default selection there, PROXY/passed.txt, failed.txt and
# skipped.txt (a test name a line;
# skipped: selected, and skipped by the test itself). Its last lines are
# machine-readable, for this run:
#   RESULT k8s-e2e PROXY passed N | failed N | skipped N | minutes N
#   RESULT k8s-e2e PROXY kubernetes K8S_VERSION
#   RESULT k8s-e2e PROXY installed_by manifest|chart
#
# Environment: K8S_VERSION, FOCUS, SKIP, K8S_E2E_SHARD, K8S_E2E_PICK,
# K8S_E2E_PROCS (ginkgo processes, 4), K8S_E2E_TIMEOUT (ginkgo's for the
# whole suite, 24h), K8S_E2E_KEEP=1 (leave the cluster up afterwards;
# `cluster.sh down` stops it), K8S_E2E_EXPECT=N (fail unless exactly N
# tests passed and none failed: a subset that must pass, as in CI; a
# renamed test would otherwise select nothing and pass), build.sh's
# K8S_E2E_IMAGES_ONLY, and cluster.sh's.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
case $target in /*) ;; *) target=$repo/$target ;; esac
# shellcheck source=../kubernetes/release.sh
source "$repo/tests/kubernetes/release.sh"
proxy=${1:?usage: $0 ours|upstream|compare}
if [[ $proxy == compare ]]; then
    exec python3 "$here/junit.py" compare "$target/k8s-e2e/$K8S_VERSION/results/ours" \
        "$target/k8s-e2e/$K8S_VERSION/results/upstream"
fi
[[ $proxy == ours || $proxy == upstream ]] || {
    echo "usage: $0 ours|upstream|compare" >&2
    exit 2
}

log() { printf '%s k8s-e2e: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

default_focus='\[sig-network\]'
# Upstream's IPVS job, then the suite's default, then what a cluster of
# two QEMU guests without the internet cannot do (docs/k8s-e2e.md).
default_skip='Alpha|Beta|LoadBalancer|Disruptive|Flaky|Networking-IPv6|IPv6DualStack|AdmissionWebhook|LocalhostNodePorts|session.affinity.timeout'
default_skip+='|\[Feature:.+\]'
focus=${FOCUS:-$default_focus}
skip=${SKIP:-$default_skip}

out=$target/k8s-e2e/$K8S_VERSION
# A run of another selection is kept apart from the default's, which the
# comparison reads.
run_name=all
[[ -z ${FOCUS:-}${SKIP:-} ]] || run_name=custom
# Ours from the chart (cluster.sh's K8S_E2E_INSTALL) is kept apart too.
install=${K8S_E2E_INSTALL:-manifest}
[[ $install == manifest ]] || run_name=$run_name-$install
pick=${K8S_E2E_PICK:-}
if [[ $pick == releases ]]; then
    pick="headless|EndpointSlice|EndpointsController|DNS|${K8S_E2E_CI_FOCUS:?K8S_E2E_PICK=releases needs K8S_E2E_CI_FOCUS: run it through make}"
    run_name=$run_name-pick-releases
elif [[ -n $pick ]]; then
    run_name=$run_name-pick-$(printf %s "$pick" | sha256sum | cut -c1-8)
fi
shard=${K8S_E2E_SHARD:-}
if [[ -n $shard ]]; then
    [[ $shard =~ ^([0-9]+)/([0-9]+)$ ]] || {
        echo "K8S_E2E_SHARD must be I/N, not '$shard'" >&2
        exit 2
    }
    run_name=$run_name-shard-${BASH_REMATCH[1]}-of-${BASH_REMATCH[2]}
fi
results=$out/results/$proxy/$run_name
start=$SECONDS

"$here/build.sh" "$out"
rm -rf "$results"
mkdir -p "$results"
K8S_E2E_PROXY=$proxy "$here/cluster.sh" up
if [[ -z ${K8S_E2E_KEEP:-} ]]; then
    trap '"$here/cluster.sh" down' EXIT
fi
eval "$("$here/cluster.sh" env)"
"$here/cluster.sh" check
"$here/cluster.sh" proxy "$proxy"
"$here/cluster.sh" dns

# What the suite starts from (its pre-flight requires every kube-system Pod
# Running and Ready); kubectl and KUBECONFIG come from cluster.sh env.
kubectl get pods -A -o wide | tee "$results/pods.txt" >&2

suite=(--kubeconfig="$KUBECONFIG" --kubectl-path="$(command -v kubectl)"
    --provider=skeleton --num-nodes=2)
if [[ -n $shard$pick ]]; then
    # The tests by name, from a dry run of the whole selection.
    "$out/bin/ginkgo" --dry-run --focus="$focus" --skip="$skip" \
        --output-dir="$results" --json-report=selected.json \
        "$out/bin/e2e.test" -- "${suite[@]}" >/dev/null
    split=${shard:-1/1}
    focus=$(python3 "$here/junit.py" shard "$results/selected.json" \
        "${split%/*}" "${split#*/}" ${pick:+"$pick"})
fi

log "running the suite against $proxy${pick:+, pick '$pick'}${shard:+, shard $shard}: focus '$focus', skip '$skip'"
suite_start=$SECONDS
status=0
"$out/bin/ginkgo" --procs="${K8S_E2E_PROCS:-4}" --timeout="${K8S_E2E_TIMEOUT:-24h}" \
    --focus="$focus" --skip="$skip" --output-dir="$results" \
    --junit-report=junit.xml --no-color \
    "$out/bin/e2e.test" -- "${suite[@]}" \
    --disable-log-dump=true --e2e-output-dir="$results/output" \
    >"$results/e2e.log" 2>&1 || status=$?
log "the suite exited with $status after $(((SECONDS - suite_start) / 60)) minutes (log: $results/e2e.log)"
# The nodes go with the run: keep what a failure's reason may be in,
# the Pods' restarts and each proxy Pod's log (both proxies' Pods are
# labelled k8s-app=kube-proxy, as kubeadm's).
kubectl get pods -A -o wide >"$results/pods-after.txt" 2>&1 || true
mkdir -p "$results/proxy-logs"
for pod in $(kubectl -n kube-system get pods -l k8s-app=kube-proxy -o name 2>/dev/null); do
    kubectl -n kube-system logs "$pod" --timestamps \
        >"$results/proxy-logs/${pod#pod/}.log" 2>&1 || true
    # A restarted proxy's last words, and why it was restarted (the
    # events below say whether a probe did it).
    kubectl -n kube-system logs "$pod" --timestamps --previous \
        >"$results/proxy-logs/${pod#pod/}.previous.log" 2>/dev/null ||
        rm -f "$results/proxy-logs/${pod#pod/}.previous.log"
done
kubectl -n kube-system get events --sort-by=.lastTimestamp \
    >"$results/kube-system-events.txt" 2>&1 || true
[[ -s $results/junit.xml ]] || {
    log "the suite wrote no report"
    exit 1
}

# This run's figures, then the lists over every run of the default
# selection for this proxy (its shards, or the whole).
python3 "$here/junit.py" summarize "$results" "$results/junit.xml"
reports=()
for f in "$out/results/$proxy"/all*/junit.xml; do
    [[ -f $f ]] && reports+=("$f")
done
if ((${#reports[@]})); then
    python3 "$here/junit.py" summarize "$out/results/$proxy" "${reports[@]}"
fi
minutes=$(((SECONDS - start + 30) / 60))
for kind in passed failed skipped; do
    echo "RESULT k8s-e2e $proxy $kind $(wc -l <"$results/$kind.txt")"
done
echo "RESULT k8s-e2e $proxy minutes $minutes"
echo "RESULT k8s-e2e $proxy kubernetes $K8S_VERSION"
echo "RESULT k8s-e2e $proxy installed_by $install"

if [[ -n ${K8S_E2E_EXPECT:-} ]]; then
    passed=$(wc -l <"$results/passed.txt")
    failed=$(wc -l <"$results/failed.txt")
    if ((passed != K8S_E2E_EXPECT || failed != 0)); then
        log "expected $K8S_E2E_EXPECT passed and none failed; $passed passed, $failed failed:"
        cat "$results/failed.txt" >&2
        exit 1
    fi
    log "all $passed expected tests passed"
fi
