#!/usr/bin/env bash
# The proxy against ip -batch, ipset restore and ipvsadm -R on the same
# state, in one boot of the real-kernel guest (benches/guest_sync prints
# the table). Part of `make bench`.
#
#   BENCH_SERVICES=10000 BENCH_REPS=6 tests/vm/bench-guest.sh
#
# Also BENCH_SETTLE_MS and BENCH_PROXY_LOG (see benches/guest_sync/main.rs). Release profile:
# the numbers are the optimised proxy's. Under TCG, 10,000 services take
# several minutes, most of them in the baseline's ipset restore.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$VM_REPO"

exe=$(cargo bench --no-run --features guest-bench --bench guest_sync \
    --message-format=json-render-diagnostics |
    jq -r 'select(.reason == "compiler-artifact"
                  and .target.name == "guest_sync") | .executable // empty')
[[ -x $exe ]] || vm_die "building the guest_sync bench gave no executable"

# 10,000 services hold ~200 MB of proxy and ~100 MB of kernel state.
export VM_MEM=${VM_MEM:-2048} VM_TIMEOUT=${VM_TIMEOUT:-3600}
export VM_PASS_ENV="${VM_PASS_ENV:-} BENCH_SERVICES BENCH_REPS BENCH_SETTLE_MS \
BENCH_PROXY_LOG"
"$VM_SRC/run" "$exe" --bench
