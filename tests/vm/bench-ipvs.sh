#!/usr/bin/env bash
# ipvs-sys against ipvsadm on the same IPVS rules, in one boot of the
# real-kernel guest (ipvs-sys/benches/vs_ipvsadm.rs prints the table).
#
#   BENCH_SERVICES=10000 BENCH_DESTS=10 tests/vm/bench-ipvs.sh
#
# Also BENCH_DUMP_CONNECTIONS, BENCH_SETTLE_MS, BENCH_WINDOW and BENCH_READS
# (see the benchmark). Under TCG, 10,000 x 10 takes about two minutes in
# the guest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$VM_REPO"

exe=$(cargo build --release -p ipvs-sys --bench vs_ipvsadm \
    --message-format=json-render-diagnostics |
    jq -r 'select(.reason == "compiler-artifact"
                  and .target.name == "vs_ipvsadm") | .executable // empty')
[[ -x $exe ]] || vm_die "building the vs_ipvsadm benchmark gave no executable"

export VM_PASS_ENV="${VM_PASS_ENV:-} BENCH_SERVICES BENCH_DESTS \
BENCH_DUMP_CONNECTIONS BENCH_SETTLE_MS BENCH_WINDOW BENCH_READS"
"$VM_SRC/run" "$exe"
