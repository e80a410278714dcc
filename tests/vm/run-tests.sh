#!/usr/bin/env bash
# Builds the workspace's kernel tests on the host and runs them in one boot
# of the real-kernel guest.
#
#   tests/vm/run-tests.sh [PACKAGE...] [-- TEST-ARGS...]
#
# PACKAGEs default to every workspace crate that has a `kernel-tests`
# feature. Each is built with `cargo test --no-run --features
# PACKAGE/kernel-tests`, and every test binary cargo reports is run in the
# guest from its package's directory, as `cargo test` would, with TEST-ARGS
# (e.g. a name filter, --nocapture). Any failing binary fails the run, after
# all have run. A library's own unit tests are the exception when nothing
# under its src/ names the feature: then they are the host's `cargo test`
# over again, many times slower under emulation.
# VM_TEST_FEATURES adds features to that build (comma separated, e.g.
# `kube-ipvs-proxy/e2e-tests` for `make e2e`); VM_TEST_EXPECT, the number
# of tests that must pass over all binaries: a name filter that matches
# nothing, or tests ignored for a missing feature, pass having run
# nothing, so a run with a filter says how many it means to run;
# VM_TEST_TARGETS, cargo's target selection (e.g. `--test cluster_e2e`;
# default every test target), so that such a run does not start in the
# guest every binary the filter leaves empty. The guest
# settings of tests/vm/run (VM_HOST_PORTS, VM_PASS_ENV, ...) pass through.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

packages=()
while (($#)); do
    case $1 in
    --)
        shift
        break
        ;;
    *)
        packages+=("$1")
        shift
        ;;
    esac
done
test_args=("$@")
if [[ -t 1 ]]; then
    test_args=(--color always "${test_args[@]}")
else
    test_args=(--color never "${test_args[@]}")
fi

"$VM_SRC/deps.sh"
cd "$VM_REPO"

metadata=$(cargo metadata --no-deps --format-version 1)
if ((${#packages[@]} == 0)); then
    mapfile -t packages < <(jq -r \
        '.packages[] | select(.features["kernel-tests"]) | .name' <<<"$metadata")
    ((${#packages[@]})) ||
        vm_die "no workspace crate has a kernel-tests feature"
fi
vm_log "kernel tests of: ${packages[*]}"

# The pod fixtures start testkit's server; other crates' test builds do not
# build it.
testpod=$(cargo build -p testkit --bin testpod --message-format=json-render-diagnostics |
    jq -r 'select(.reason == "compiler-artifact" and .target.name == "testpod")
           | .executable // empty')
[[ -x $testpod ]] || vm_die "building testpod gave no executable"

cargo_args=()
features=()
for p in "${packages[@]}"; do
    cargo_args+=(-p "$p")
    features+=("$p/kernel-tests")
done
if [[ -n ${VM_TEST_FEATURES:-} ]]; then
    features+=("$VM_TEST_FEATURES")
fi
features_csv=$(
    IFS=,
    echo "${features[*]}"
)
# One line per test binary: executable, package directory, description.
# shellcheck disable=SC2206 # cargo's flags, one word each
targets=(${VM_TEST_TARGETS:-})
binaries=$(cargo test --no-run "${cargo_args[@]}" "${targets[@]}" --features "$features_csv" \
    --message-format=json-render-diagnostics |
    jq -r --argjson meta "$metadata" '
        ($meta.packages | map({(.id): .name}) | add) as $names
        | select(.reason == "compiler-artifact" and .profile.test
                 and .executable != null)
        | [.executable, (.manifest_path | sub("/Cargo.toml$"; "")),
           "\($names[.package_id]) \(.target.kind[0]) \(.target.name)"]
        | @tsv')
[[ -n $binaries ]] || vm_die "cargo built no test binaries for ${packages[*]}"

runs=$(vm_cache_dir)/runs
mkdir -p "$runs"
script=$(mktemp "$runs/tests.XXXXXX.sh")
host_only=()
trap 'rm -f "$script"' EXIT
{
    printf 'export TESTKIT_TESTPOD=%q\n' "$testpod"
    printf 'args=('
    printf '%q ' "${test_args[@]}"
    printf ')\n'
    printf 'expect=%q\n' "${VM_TEST_EXPECT:-}"
    echo 'failed=()'
    # The last summary of each binary counts: a test that runs this
    # binary again (kernel_iptables, under unshare) prints one too.
    cat <<'EOF'
passed=0
out=/tmp/vm-test.out
run_binary() {
    local dir=$1 exe=$2 rc
    (cd "$dir" && CARGO_MANIFEST_DIR=$dir "$exe" "${args[@]}") 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    passed=$((passed + $(awk 'match($0, /^test result: .* [0-9]+ passed;/) {
        n = $0; sub(/ passed;.*/, "", n); sub(/.* /, "", n) } END { print n + 0 }' "$out")))
    return "$rc"
}
EOF
    while IFS=$'\t' read -r exe dir what; do
        if [[ $what == *" lib "* ]] &&
            ! grep -rqs 'feature = "kernel-tests"' "$dir/src"; then
            host_only+=("$what")
            continue
        fi
        printf 'echo %q\n' "==> $what"
        printf 'run_binary %q %q || failed+=(%q)\n' "$dir" "$exe" "$what"
    done <<<"$binaries"
    cat <<'EOF'
echo "vm-test: $passed tests passed${expect:+, $expect expected}"
if [[ -n $expect ]] && ((passed != expect)); then
    failed+=("$passed tests passed where $expect were expected (a test renamed, a filter or a feature that leaves some out?)")
fi
if ((${#failed[@]})); then
    echo "vm-test: FAILED in the guest:"
    printf '  %s\n' "${failed[@]}"
    exit 1
fi
echo "vm-test: all kernel test binaries passed"
EOF
} >"$script"
((${#host_only[@]} == 0)) ||
    vm_log "not run in the guest (host unit tests, no kernel-tests code): ${host_only[*]}"

# Every suite in one boot: the proxy's traffic tests alone take minutes
# under TCG on a loaded 2-core host, more than tests/vm/run's default.
export VM_TIMEOUT=${VM_TIMEOUT:-1800}
"$VM_SRC/run" bash "$script"
