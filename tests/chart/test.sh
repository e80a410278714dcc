#!/usr/bin/env bash
# The Helm chart (deploy/chart/kube-ipvs-proxy), checked without a cluster
# and then against a real API server (make chart-test):
#
# 1. helm lint, with the defaults and with each profile of
#    tests/chart/profiles/;
# 2. helm template for each profile, and the renderings the chart must
#    refuse (a bad mode, the split without its endpoint, ...);
# 3. check.py on the renderings: every DaemonSet is a node proxy in place
#    of kube-proxy (k8s-app: kube-proxy, system-node-critical, host
#    network), and the profiles that mirror the plain manifests render the
#    same objects as deploy/kube-ipvs-proxy.yaml, deploy/split/split.yaml
#    and deploy/monitoring/podmonitor.yaml;
# 4. promtool on the alerts: the rules parse, and alerts-test.yaml's cases
#    fire (and stay quiet) as they should;
# 5. a loopback etcd and kube-apiserver, as tests/e2e/control-plane.sh
#    starts them, with prometheus-operator's PodMonitor and PrometheusRule
#    CRDs, and each profile applied with a server-side dry run;
# 6. kubernetes-mixin's KubeVersionMismatch on what that API server and
#    ours (the API side, against it) serve as kubernetes_build_info;
# 7. kubeadm's kube-proxy addon on that API server (kubeadm.sh): what an
#    upgrade's addon phase undoes of install.md's switch, and
#    proxy.disabled keeping it away.
#
# What it needs it installs or builds once, only if missing: helm from its
# Go module and promtool from Debian's prometheus package under
# ${XDG_CACHE_HOME:-$HOME/.cache}/kube-ipvs-proxy/, the upstream binaries
# with tests/e2e/build-k8s.sh (many minutes the first time) into
# E2E_K8S_DIR, by default the first of $TARGET/k8s and that cache folder
# that has them (the cache one when neither does, as CI builds there).
#
# Environment: CHART_TEST_SERVER=0 skips step 5; CHART_TEST_APISERVER_PORT
# (6543), CHART_TEST_ETCD_PORT (23890; the peer port is the next one) and
# CHART_TEST_METRICS_PORT (19444, ours' metrics in step 6), beside
# control-plane.sh's own ports so that both can run at once.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
chart="$repo/deploy/chart/kube-ipvs-proxy"
target=${CARGO_TARGET_DIR:-$repo/target}
work="$target/chart-test"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/kube-ipvs-proxy"

# One version each, so that every machine checks the same way.
helm_version=v3.22.0
prometheus_operator_version=v0.85.0

api_port=${CHART_TEST_APISERVER_PORT:-6543}
etcd_port=${CHART_TEST_ETCD_PORT:-23890}
metrics_port=${CHART_TEST_METRICS_PORT:-19444}
etcd_peer_port=$((etcd_port + 1))
release=kube-ipvs-proxy
namespace=kube-system

start=$SECONDS
log() { printf '%s chart-test: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() {
    log "$*"
    echo "RESULT chart-test FAILED: $*"
    exit 1
}

# Installs Debian packages that are missing (as tests/vm/deps.sh does,
# without its guest harness).
apt_install() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
            missing+=("$p")
    done
    ((${#missing[@]} == 0)) && return 0
    local sudo=()
    ((EUID == 0)) || sudo=(sudo)
    log "installing ${missing[*]}"
    "${sudo[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq \
        --no-install-recommends "${missing[@]}" >&2
}

# Go, without a toolchain fetched behind our back.
go_env=(env GOTOOLCHAIN=local CGO_ENABLED=0)

install_helm() {
    helm="$cache/helm-$helm_version/helm"
    [[ -x $helm ]] && return 0
    command -v go >/dev/null || die "go is needed to build helm"
    log "building helm $helm_version from its Go module into $(dirname "$helm")"
    mkdir -p "$(dirname "$helm")"
    (cd "$cache" && "${go_env[@]}" GOFLAGS=-trimpath GOBIN="$(dirname "$helm")" \
        go install -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version" \
        "helm.sh/helm/v3/cmd/helm@$helm_version") >&2
}

# promtool alone, out of Debian's prometheus package: installing the
# package would also set up (and might start) a Prometheus server.
install_promtool() {
    promtool="$cache/promtool/promtool"
    [[ -x $promtool ]] && return 0
    command -v apt-get >/dev/null || die "promtool: no apt-get to fetch Debian's prometheus package"
    log "extracting promtool from Debian's prometheus package into $(dirname "$promtool")"
    local tmp
    tmp=$(mktemp -d)
    # A machine that never ran apt-get update has no package lists.
    (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1) || {
        local sudo=()
        ((EUID == 0)) || sudo=(sudo)
        "${sudo[@]}" apt-get update -qq
        (cd "$tmp" && apt-get download prometheus >&2)
    }
    dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
    mkdir -p "$(dirname "$promtool")"
    install -m 0755 "$tmp/x/usr/bin/promtool" "$promtool"
    rm -rf "$tmp"
}

# PyYAML for check.py: the python3 on the PATH may have it, or take it from
# PyPI; else Debian's python3 with python3-yaml.
python=python3
if ! "$python" -c 'import yaml' 2>/dev/null; then
    log "PyYAML missing for $python: installing it"
    "$python" -m pip install --quiet pyyaml >&2 2>/dev/null || true
    if ! "$python" -c 'import yaml' 2>/dev/null; then
        apt_install python3 python3-yaml
        python=/usr/bin/python3
    fi
fi
install_helm
# --tools-only: helm and promtool made ready, nothing tested, helm's path
# printed (CI builds them beside other work; cluster.sh installs with it).
[[ ${1:-} != --tools-only ]] || {
    install_promtool
    echo "$helm"
    exit 0
}
install_promtool
log "helm $("$helm" version --template '{{.Version}}'), $("$promtool" --version 2>&1 | head -1)"

rm -rf "$work"
mkdir -p "$work/rendered"

# 1 and 2: lint and render every profile.
profiles=()
for file in "$here"/profiles/*.yaml; do
    profiles+=("$(basename "$file" .yaml)")
done
((${#profiles[@]} > 0)) || die "no profiles in $here/profiles"
"$helm" lint --strict "$chart" >&2 || die "helm lint (defaults)"
for p in "${profiles[@]}"; do
    "$helm" lint --strict --namespace "$namespace" -f "$here/profiles/$p.yaml" \
        "$chart" >"$work/lint-$p.log" 2>&1 || {
        cat "$work/lint-$p.log" >&2
        die "helm lint ($p)"
    }
    "$helm" template "$release" "$chart" --namespace "$namespace" \
        -f "$here/profiles/$p.yaml" >"$work/rendered/$p.yaml" ||
        die "helm template ($p)"
done
log "lint and template: ${#profiles[@]} profiles"

# What the chart must refuse, each with a message that says what to set.
refused=0
refuses() {
    local expected=$1
    shift
    local out
    if out=$("$helm" template "$release" "$chart" --namespace "$namespace" "$@" 2>&1); then
        die "helm template $* rendered; it should have refused ($expected)"
    fi
    grep -qF -- "$expected" <<<"$out" || die "helm template $*: expected \"$expected\" in: $out"
    refused=$((refused + 1))
}
refuses "mode must be direct or split" --set mode=both
refuses "split.endpoint: how the nodes reach" --set mode=split
refuses "split.endpoint must be https://" --set mode=split --set split.endpoint=api-side:9443
refuses "split.nodeAuth must be token or certificate" --set mode=split \
    --set split.endpoint=https://api-side.invalid:9443 --set split.nodeAuth=password
refuses "config.apiServer: the API server's address" --set config.create=true
refuses "give affinity.nodeAffinity or migration.nodeLabel, not both" \
    --set migration.nodeLabel=kube-ipvs-proxy.io/enabled --set affinity.nodeAffinity.x=y
refuses "serviceAccount.name: the existing ServiceAccount" --set serviceAccount.create=false
log "refused renderings: $refused"

# 3: the renderings themselves.
"$python" "$here/check.py" "$repo" "$work/rendered" "${profiles[@]}" >&2 ||
    die "check.py"

# 4: the alerts.
"$python" - "$work/rendered/monitoring.yaml" "$work/rules.yaml" <<'EOF' || die "no PrometheusRule in the monitoring profile"
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "PrometheusRule"]
assert len(docs) == 1, f"{len(docs)} PrometheusRules"
yaml.safe_dump({"groups": docs[0]["spec"]["groups"]}, open(sys.argv[2], "w"))
EOF
cp "$here/alerts-test.yaml" "$work/"
"$promtool" check rules "$work/rules.yaml" >&2 || die "promtool check rules"
(cd "$work" && "$promtool" test rules alerts-test.yaml) >&2 || die "promtool test rules"
alerts=$(grep -c '^ *- alert:' "$work/rules.yaml")
log "alerts: $alerts rules parse and pass alerts-test.yaml"

if [[ ${CHART_TEST_SERVER:-1} == 0 ]]; then
    log "server-side dry run skipped (CHART_TEST_SERVER=0)"
    echo "RESULT chart-test passed: ${#profiles[@]} profiles (${profiles[*]}) linted, rendered and checked; $refused refusals; $alerts alerts; server-side dry run skipped; helm $helm_version; $((SECONDS - start))s"
    exit 0
fi

# 5: a real API server. The binaries control-plane.sh uses, built as it
# builds them. v1.37.2's API server refuses to advertise a loopback
# address into the kubernetes Service's endpoints; nothing here reaches it
# through that Service, so there are none.
# shellcheck source=../kubernetes/release.sh
source "$repo/tests/kubernetes/release.sh"
if [[ -z ${E2E_K8S_DIR:-} && ! -x $k8s_bin/kube-apiserver ]]; then
    export E2E_K8S_DIR=$cache/k8s
    # shellcheck source=../kubernetes/release.sh
    source "$repo/tests/kubernetes/release.sh"
fi
bin=$k8s_bin
command -v openssl >/dev/null && command -v curl >/dev/null || apt_install openssl curl
"$repo/tests/e2e/build-k8s.sh" || die "tests/e2e/build-k8s.sh"

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for port in "$api_port" "$etcd_port" "$etcd_peer_port"; do
    port_free "$port" || die "127.0.0.1:$port is in use (CHART_TEST_APISERVER_PORT, CHART_TEST_ETCD_PORT)"
done

run="$work/control-plane"
mkdir -p "$run/logs" "$run/pki"
pids=()
# The API server, then etcd: TERM, then KILL after 3 seconds (nothing here
# needs the API server's graceful wind-down, which can take 10 and more).
stop() {
    local i pid
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        pid=${pids[i]}
        kill "$pid" 2>/dev/null || continue
        for _ in $(seq 15); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        kill -9 "$pid" 2>/dev/null || true
    done
}
trap stop EXIT
spawn() {
    local name=$1
    shift
    "$@" </dev/null >>"$run/logs/$name.log" 2>&1 &
    pids+=($!)
}
wait_for() {
    local what=$1 seconds_=$2
    shift 2
    local deadline=$((SECONDS + seconds_))
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            tail -n 20 "$run"/logs/*.log >&2
            die "timed out after ${seconds_}s waiting for $what"
        fi
        sleep 0.5
    done
}

pki="$run/pki"
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -keyout "$pki/ca.key" \
    -out "$pki/ca.crt" -subj "/CN=chart-test-ca" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout "$pki/apiserver.key" \
    -out "$pki/apiserver.csr" -subj "/CN=kube-apiserver" 2>/dev/null
printf 'subjectAltName = IP:127.0.0.1, DNS:localhost\nextendedKeyUsage = serverAuth\n' \
    >"$pki/apiserver.ext"
openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -CAcreateserial -days 1 -extfile "$pki/apiserver.ext" \
    -out "$pki/apiserver.crt" 2>/dev/null
openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
# Loopback only, for the life of this run.
token=chart-test-admin-token
printf '%s,admin,admin,"system:masters"\n' "$token" >"$pki/tokens.csv"
cat >"$run/admin.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: chart-test
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority-data: $(base64 -w0 <"$pki/ca.crt")
users:
- name: admin
  user:
    token: $token
contexts:
- name: chart-test
  context:
    cluster: chart-test
    user: admin
current-context: chart-test
EOF
kubectl() { "$bin/kubectl" --kubeconfig "$run/admin.kubeconfig" "$@"; }

log "starting etcd on 127.0.0.1:$etcd_port and kube-apiserver on 127.0.0.1:$api_port"
spawn etcd "$bin/etcd" --name chart-test --data-dir "$run/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster "chart-test=http://127.0.0.1:$etcd_peer_port" \
    --unsafe-no-fsync --log-level warn
wait_for etcd 120 curl -fsS "http://127.0.0.1:$etcd_port/health"
spawn kube-apiserver "$bin/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --secure-port "$api_port" \
    --advertise-address 127.0.0.1 --endpoint-reconciler-type none \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --token-auth-file "$pki/tokens.csv" \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$pki/sa.pub" \
    --service-account-signing-key-file "$pki/sa.key" \
    --service-cluster-ip-range 198.18.0.0/16 \
    --authorization-mode RBAC \
    --allow-privileged=true --profiling=false
wait_for "kube-apiserver /readyz" 180 kubectl get --raw /readyz
# The API server makes kube-system and the built-in PriorityClasses itself.
wait_for "the kube-system namespace" 60 kubectl get namespace "$namespace"
wait_for "PriorityClass system-node-critical" 60 kubectl get priorityclass system-node-critical
log "kube-apiserver $("$bin/kubectl" version --client -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])') ready, $((SECONDS - start))s into the run"

# prometheus-operator's CRDs, from its Go module.
crds=$(cd "$cache" && "${go_env[@]}" GOFLAGS=-mod=mod go mod download -json \
    "github.com/prometheus-operator/prometheus-operator@$prometheus_operator_version" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')/example/prometheus-operator-crd
for crd in podmonitors prometheusrules; do
    kubectl apply --server-side -f "$crds/monitoring.coreos.com_$crd.yaml" >&2
    kubectl wait --for condition=Established --timeout=60s \
        "crd/$crd.monitoring.coreos.com" >&2
done
# The namespace the monitoring profile puts its objects in.
kubectl create namespace monitoring >&2

dry_run=0
for p in "${profiles[@]}"; do
    if ! kubectl apply --server-side --dry-run=server --field-manager=chart-test \
        -f "$work/rendered/$p.yaml" >"$work/dry-run-$p.log" 2>&1; then
        cat "$work/dry-run-$p.log" >&2
        die "server-side dry run ($p)"
    fi
    log "server-side dry run: $p: $(grep -c 'serverside-applied (server dry run)' "$work/dry-run-$p.log") objects admitted"
    dry_run=$((dry_run + 1))
done

# helm install against the same server, without installing: its own
# checks of the objects, and the NOTES, which only an install renders.
notes() {
    local p=$1
    shift
    KUBECONFIG="$run/admin.kubeconfig" "$helm" install "$release" "$chart" \
        --namespace "$namespace" -f "$here/profiles/$p.yaml" --dry-run=server \
        >"$work/install-$p.log" 2>&1 || {
        cat "$work/install-$p.log" >&2
        die "helm install --dry-run=server ($p)"
    }
    local want
    for want in "rollout status daemonset $release" "$@"; do
        sed -n '/^NOTES:/,$p' "$work/install-$p.log" | grep -qF -- "$want" || {
            sed -n '/^NOTES:/,$p' "$work/install-$p.log" >&2
            die "the NOTES of $p lack \"$want\""
        }
    done
}
notes default "patch daemonset kube-proxy" '"kube-ipvs-proxy/run-kube-proxy":"true"'
notes migration '"operator":"NotIn"' "kubectl label node NODE kube-ipvs-proxy.io/enabled=true"
notes monitoring "metricsBindAddress: 0.0.0.0:10249"
notes split-tokens "(split mode)"
log "helm install --dry-run=server: the NOTES of 4 profiles"

# 6: kubernetes-mixin's KubeVersionMismatch over two real scrapes: the API
# server's kubernetes_build_info and that of ours (the API side, which
# needs no kernel, against the same server), quiet together and firing
# with ours as it reported itself before (its own version); mixin.py.
log "building kube-ipvs-proxy for the mixin check"
(cd "$repo" && cargo build --quiet --bin kube-ipvs-proxy) || die "cargo build"
port_free "$metrics_port" || die "127.0.0.1:$metrics_port is in use (CHART_TEST_METRICS_PORT)"
spawn api-side "$target/debug/kube-ipvs-proxy" api-server \
    --kubeconfig "$run/admin.kubeconfig" --listen "unix://$run/api-side.sock" \
    --metrics-bind-address "127.0.0.1:$metrics_port"
scrape_ours() {
    curl -fsS "http://127.0.0.1:$metrics_port/metrics" >"$work/ours.metrics" &&
        grep -q '^kubernetes_build_info{' "$work/ours.metrics"
}
wait_for "kubernetes_build_info from ours" 60 scrape_ours
kubectl get --raw /metrics >"$work/apiserver.metrics"
mkdir -p "$work/mixin"
python3 "$here/mixin.py" "$work/apiserver.metrics" "$work/ours.metrics" "$work/mixin" >&2 ||
    die "mixin.py"
(cd "$work/mixin" && "$promtool" test rules test.yaml) >&2 ||
    die "KubeVersionMismatch (promtool test rules $work/mixin/test.yaml)"
log "KubeVersionMismatch: quiet with ours beside kube-apiserver, firing with ours' own version"

# 7: kubeadm's kube-proxy addon over install.md's switch, on the same
# server (kubeadm.sh).
"$here/kubeadm.sh" "$bin/kubeadm" "$bin/kubectl" "$run/admin.kubeconfig" \
    "$target/debug/kube-ipvs-proxy" "$work/kubeadm" >"$work/kubeadm.txt" ||
    die "kubeadm.sh (its work: $work/kubeadm)"
kubeadm_result=$(sed -n 's/^RESULT kubeadm //p' "$work/kubeadm.txt")

echo "RESULT chart-test passed: ${#profiles[@]} profiles (${profiles[*]}) linted, rendered and checked; $refused refusals; $alerts alerts; KubeVersionMismatch quiet beside kube-apiserver; kubeadm $kubeadm_result; $dry_run profiles admitted by kube-apiserver (server-side dry run, prometheus-operator $prometheus_operator_version CRDs); helm $helm_version; $((SECONDS - start))s"
